//! rsockets between two uroce devices of this process over real UDP on loopback: a
//! stream both ways with sizes that wrap the rings and run out of credits, blocking and
//! non-blocking calls, peek, shutdown of one direction, close, and a connect to nobody.

use std::net::SocketAddr;
use std::sync::Once;
use std::thread;
use uroce_verbs::rsocket::{MsgFlags, RSocket, Shutdown, SockOpt};

const SERVER: &str = "127.0.11.2";

fn setup() {
    static ONCE: Once = Once::new();
    // Set before any thread of this process reads the environment (every test calls
    // this first, and the Once orders them).
    ONCE.call_once(|| std::env::set_var("UROCE_DEVICES", "rs0=127.0.11.1,rs1=127.0.11.2"));
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(SERVER.parse().unwrap(), port)
}

fn listener(port: u16, buf: u32) -> RSocket {
    let l = RSocket::new(false).unwrap();
    l.set_option(SockOpt::RcvBuf, buf).unwrap();
    l.set_option(SockOpt::SndBuf, buf).unwrap();
    l.bind(addr(port)).unwrap();
    l.listen(1).unwrap();
    l
}

fn client(port: u16, buf: u32) -> RSocket {
    let c = RSocket::new(false).unwrap();
    c.set_option(SockOpt::RcvBuf, buf).unwrap();
    c.set_option(SockOpt::SndBuf, buf).unwrap();
    c.bind("127.0.11.1:0".parse().unwrap()).unwrap();
    c.connect(addr(port)).unwrap();
    c
}

fn send_all(s: &RSocket, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        off += s.send(&data[off..], MsgFlags::default()).unwrap();
    }
}

fn recv_exact(s: &RSocket, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut off = 0;
    while off < len {
        let n = s.recv(&mut out[off..], MsgFlags::default()).unwrap();
        assert!(n > 0, "end of stream after {off} of {len} bytes");
        off += n;
    }
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn stream_both_ways_wraps_rings_and_credits() {
    setup();
    // A 16 KiB receive buffer (8 KiB grants) and 16-entry queues: 1 MiB each way
    // wraps both rings many times and needs fresh credits over and over.
    let l = listener(7601, 8192);
    l.set_option(SockOpt::RqSize, 16).unwrap();
    l.set_option(SockOpt::SqSize, 16).unwrap();
    let server = thread::spawn(move || {
        let s = l.accept().unwrap();
        for (i, len) in [1usize, 64, 65, 4096, 10_000, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let got = recv_exact(&s, len);
            assert_eq!(got, pattern(len, i as u8), "message {i} of {len} bytes");
            send_all(&s, &got);
        }
        s
    });
    let c = client(7601, 8192);
    c.set_option(SockOpt::Inline, 32).unwrap_err();
    for (i, len) in [1usize, 64, 65, 4096, 10_000, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let p = pattern(len, i as u8);
        send_all(&c, &p);
        assert_eq!(recv_exact(&c, len), p, "echo {i} of {len} bytes");
    }
    let s = server.join().unwrap();
    // Shut the client's writing side: the server reads the end of the stream, and can
    // still write to the client.
    c.shutdown(Shutdown::Write).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(s.recv(&mut b, MsgFlags::default()).unwrap(), 0);
    send_all(&s, b"after");
    assert_eq!(recv_exact(&c, 5), b"after");
    s.close();
    let mut b = [0u8; 8];
    assert_eq!(
        c.recv(&mut b, MsgFlags::default()).unwrap(),
        0,
        "closed by the peer"
    );
    assert_ne!(c.poll(libc::POLLIN) & libc::POLLHUP, 0);
    c.close();
}

#[test]
fn nonblocking_calls_say_eagain_and_peek_leaves_data() {
    setup();
    let l = listener(7602, 1 << 16);
    let c = RSocket::new(false).unwrap();
    c.set_nonblocking(true);
    let e = c.connect(addr(7602)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINPROGRESS));
    l.set_nonblocking(true);
    let s = loop {
        match l.accept() {
            Ok(s) => break s,
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
        }
        thread::yield_now();
    };
    while c.poll(libc::POLLOUT) & libc::POLLOUT == 0 {
        thread::yield_now();
    }
    assert_eq!(c.take_error(), 0);
    let mut b = [0u8; 4];
    let e = s.recv(&mut b, MsgFlags::default()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "nothing sent yet");
    assert_eq!(c.send(b"peek", MsgFlags::default()).unwrap(), 4);
    while s.poll(libc::POLLIN) & libc::POLLIN == 0 {
        thread::yield_now();
    }
    let peek = MsgFlags {
        peek: true,
        ..MsgFlags::default()
    };
    assert_eq!(s.recv(&mut b, peek).unwrap(), 4);
    assert_eq!(&b, b"peek");
    let mut b2 = [0u8; 4];
    assert_eq!(s.recv(&mut b2, MsgFlags::default()).unwrap(), 4);
    assert_eq!(&b2, b"peek");
    c.close();
    s.close();
}

/// A connect to a port nobody listens on, at an address whose CM is up, is refused (the
/// peer's CM answers the REQ with a REJ). The listener on another port brings up the
/// server's device in this process: alone (one test thread, as on a 1-CPU host) nothing
/// else would, and a REQ to an address with no CM at all times out instead, as it should.
#[test]
fn connect_to_nobody_is_refused() {
    setup();
    let _up = listener(7698, 4096);
    let c = RSocket::new(false).unwrap();
    let e = c.connect(addr(7699)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
    assert_ne!(c.poll(libc::POLLOUT) & libc::POLLERR, 0);
    // As librdmacm: a socket that cannot write says ECONNRESET.
    let e = c.send(b"x", MsgFlags::default()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
}

/// rstream's defaults: 512 KiB asked for each buffer, non-blocking calls spun on, 16
/// bytes each way, then 64-byte ping-pongs.
#[test]
fn rstream_defaults_nonblocking_pingpong() {
    setup();
    let l = listener(7603, 1 << 19);
    l.set_nonblocking(true);
    let spin_recv = |s: &RSocket, len: usize| {
        let mut b = vec![0u8; len];
        let mut off = 0;
        while off < len {
            match s.recv(
                &mut b[off..],
                MsgFlags {
                    dontwait: true,
                    ..MsgFlags::default()
                },
            ) {
                Ok(n) => off += n,
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
            }
        }
        b
    };
    let spin_send = |s: &RSocket, d: &[u8]| {
        let mut off = 0;
        while off < d.len() {
            match s.send(
                &d[off..],
                MsgFlags {
                    dontwait: true,
                    ..MsgFlags::default()
                },
            ) {
                Ok(n) => off += n,
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
            }
        }
    };
    let server = thread::spawn(move || {
        let s = loop {
            if let Ok(s) = l.accept() {
                break s;
            }
        };
        s.set_nonblocking(true);
        let b = spin_recv(&s, 16);
        spin_send(&s, &b);
        for _ in 0..2000 {
            let b = spin_recv(&s, 64);
            spin_send(&s, &b);
        }
        s.shutdown(Shutdown::Both).unwrap();
        s.close();
    });
    let c = RSocket::new(false).unwrap();
    c.set_option(SockOpt::RcvBuf, 1 << 19).unwrap();
    c.set_option(SockOpt::SndBuf, 1 << 19).unwrap();
    c.set_nonblocking(true);
    c.bind("127.0.11.1:7603".parse().unwrap()).unwrap();
    let e = c.connect(addr(7603)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINPROGRESS));
    while c.poll(libc::POLLOUT) == 0 {}
    assert_eq!(c.take_error(), 0);
    spin_send(&c, &[7u8; 16]);
    assert_eq!(spin_recv(&c, 16), vec![7u8; 16]);
    for i in 0..2000u32 {
        let p = pattern(64, i as u8);
        spin_send(&c, &p);
        assert_eq!(spin_recv(&c, 64), p, "ping {i}");
    }
    server.join().unwrap();
    c.shutdown(Shutdown::Both).unwrap();
    c.close();
}

/// rstream's bandwidth mode sets `RDMA_INLINE` to 0: every byte goes through the send
/// buffer, and the 16-byte grants still go out (inline, whatever the data's limit).
#[test]
fn no_inline_data_still_grants_space() {
    setup();
    let l = listener(7604, 8192);
    l.set_option(SockOpt::Inline, 0).unwrap();
    let server = thread::spawn(move || {
        let s = l.accept().unwrap();
        let got = recv_exact(&s, 100_000);
        send_all(&s, &got);
        s.close();
    });
    let c = RSocket::new(false).unwrap();
    c.set_option(SockOpt::Inline, 0).unwrap();
    c.set_option(SockOpt::RcvBuf, 8192).unwrap();
    c.bind("127.0.11.1:0".parse().unwrap()).unwrap();
    c.connect(addr(7604)).unwrap();
    assert_eq!(c.option(SockOpt::Inline), 0);
    let p = pattern(100_000, 9);
    send_all(&c, &p);
    assert_eq!(recv_exact(&c, p.len()), p);
    server.join().unwrap();
    c.close();
}
