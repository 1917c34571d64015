#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <string.h>
/* The lab guests' UDP floor for the README's latency figures (not part of any test).
   Build: cc -O2 -o udp_pingpong tests/lab/udp_pingpong.c; put it in RXELAB_SHARE, then
     guest 1: udp_pingpong server PORT spin|block ack|noack
     guest 2: udp_pingpong client 10.99.0.11 PORT N spin|block ack|noack
   64-byte messages; prints min, median and p90 of the whole round trip in microseconds.
   ack: every message is answered with an 8-byte ACK datagram first, as an RC responder
   acknowledges a SEND before its reply. SPDX-License-Identifier: MIT OR Apache-2.0 */
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static int spin;
static ssize_t rmsg(int s,char*buf,struct sockaddr_in*f){ for(;;){ socklen_t fl=sizeof *f; ssize_t n=recvfrom(s,buf,2048,spin?MSG_DONTWAIT:0,(void*)f,&fl); if(n<0) continue; if(buf[0]==1) continue; return n; } }
int main(int argc,char**argv){
  if(argc<2 || (strcmp(argv[1],"server") ? argc!=7 : argc!=5)){
    fprintf(stderr,"usage: %s server PORT spin|block ack|noack\n       %s client HOST PORT N spin|block ack|noack\n",argv[0],argv[0]);
    return 2; }
  int srv=!strcmp(argv[1],"server");
  int s=socket(AF_INET,SOCK_DGRAM,0); struct sockaddr_in a={.sin_family=AF_INET}, f;
  char buf[2048], ack[8]={1};
  if(srv){ a.sin_port=htons(atoi(argv[2])); bind(s,(void*)&a,sizeof a); spin=!strcmp(argv[3],"spin"); int acks=!strcmp(argv[4],"ack");
    for(;;){ ssize_t n=rmsg(s,buf,&f); if(acks) sendto(s,ack,8,0,(void*)&f,sizeof f); sendto(s,buf,n,0,(void*)&f,sizeof f);} }
  if(inet_pton(AF_INET,argv[2],&a.sin_addr)!=1 || atoi(argv[4])<=0){ fprintf(stderr,"bad HOST or N\n"); return 2; }
  a.sin_port=htons(atoi(argv[3])); int N=atoi(argv[4]); spin=!strcmp(argv[5],"spin"); int acks=!strcmp(argv[6],"ack");
  double*t=malloc(N*sizeof(double)); memset(buf,0,64);
  for(int i=0;i<N;i++){ double t0=now(); sendto(s,buf,64,0,(void*)&a,sizeof a); rmsg(s,buf,&f); buf[0]=0; if(acks) sendto(s,ack,8,0,(void*)&a,sizeof a); t[i]=now()-t0;}
  qsort(t,N,sizeof(double),cmp); printf("round trip us: min %.1f median %.1f p90 %.1f\n",t[0],t[N/2],t[N*9/10]); return 0;}
