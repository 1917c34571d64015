#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <arpa/inet.h>
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
/* The lab guests' UDP bandwidth floor for the README's figures (not part of any test).
   Build: cc -O2 -o udp_blast tests/lab/udp_blast.c; put it in RXELAB_SHARE, then
     guest 1: udp_blast recv PORT SECONDS gro|nogro
     guest 2: udp_blast send 10.99.0.11 PORT SECONDS SIZE BATCH GSO_SEGS
   The sender sends SIZE-byte datagrams in sendmmsg calls of BATCH (at most 64) for SECONDS;
   GSO_SEGS > 0 makes each entry one UDP_SEGMENT send of that many SIZE-byte segments (1: a
   single datagram sent paged, as uroce's paged sends). The receiver counts what arrives for
   SECONDS from the first datagram and prints MB/s. SPDX-License-Identifier: MIT OR Apache-2.0 */
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  if(argc<2 || (!strcmp(argv[1],"recv") ? argc!=5 : (strcmp(argv[1],"send") || argc!=8))){
    fprintf(stderr,"usage: %s recv PORT SECONDS gro|nogro\n       %s send HOST PORT SECONDS SIZE BATCH GSO_SEGS\n",argv[0],argv[0]);
    return 2; }
  int s=socket(AF_INET,SOCK_DGRAM,0); struct sockaddr_in a={.sin_family=AF_INET};
  if(!strcmp(argv[1],"recv")){
    a.sin_port=htons(atoi(argv[2])); bind(s,(void*)&a,sizeof a); double secs=atof(argv[3]);
    int one=1; if(!strcmp(argv[4],"gro")) setsockopt(s,IPPROTO_UDP,UDP_GRO,&one,sizeof one);
    int rb=8<<20; setsockopt(s,SOL_SOCKET,SO_RCVBUF,&rb,sizeof rb);
    static char bufs[16][65536]; struct mmsghdr m[16]; struct iovec io[16];
    for(int i=0;i<16;i++){io[i].iov_base=bufs[i];io[i].iov_len=65536;memset(&m[i],0,sizeof m[i]);m[i].msg_hdr.msg_iov=&io[i];m[i].msg_hdr.msg_iovlen=1;}
    double t0=0,end=0; long bytes=0,calls=0;
    for(;;){ int n=recvmmsg(s,m,16,0,NULL); if(n<=0) continue; if(!t0){t0=now();end=t0+secs;}
      for(int i=0;i<n;i++) bytes+=m[i].msg_len;
      calls++; if(now()>end) break; }
    double el=now()-t0; printf("recv %.2f MB/s over %.1f s, %ld calls\n",bytes/el/1e6,el,calls); return 0;
  }
  if(inet_pton(AF_INET,argv[2],&a.sin_addr)!=1){ fprintf(stderr,"bad HOST\n"); return 2; } a.sin_port=htons(atoi(argv[3])); connect(s,(void*)&a,sizeof a);
  double secs=atof(argv[4]); int size=atoi(argv[5]), batch=atoi(argv[6]), gso=atoi(argv[7]);
  if(size<=0 || batch<=0 || batch>64 || gso<0 || (long)size*(gso?gso:1)>65507){ fprintf(stderr,"bad SIZE, BATCH or GSO_SEGS\n"); return 2; }
  int pmtu=IP_PMTUDISC_DO; setsockopt(s,IPPROTO_IP,IP_MTU_DISCOVER,&pmtu,sizeof pmtu);
  int len=gso?size*gso:size; if(gso){int g=size; setsockopt(s,IPPROTO_UDP,UDP_SEGMENT,&g,sizeof g);}
  char *buf=calloc(1,len); struct mmsghdr m[64]; struct iovec io[64];
  for(int i=0;i<batch;i++){io[i].iov_base=buf;io[i].iov_len=len;memset(&m[i],0,sizeof m[i]);m[i].msg_hdr.msg_iov=&io[i];m[i].msg_hdr.msg_iovlen=1;}
  double t0=now(),end=t0+secs; long bytes=0;
  while(now()<end){ int n=sendmmsg(s,m,batch,0); if(n>0) bytes+=(long)n*len; }
  printf("send %.2f MB/s\n",bytes/(now()-t0)/1e6); return 0;
}
