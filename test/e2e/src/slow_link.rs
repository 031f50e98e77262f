//! A slow network link to an API server, for faults a real API server cannot be
//! asked to make: a TCP relay on 127.0.0.1 that forwards every byte (TLS stays
//! end to end) and holds what the client sends for a settable delay before it goes
//! on. A process given a kubeconfig through it ([`crate::Env::kubeconfig_through`])
//! sees every request answered that much later, on the simulator and on a real
//! cluster alike.

use std::{
    io::{Read, Write},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::Context;

/// The relay; dropping it stops accepting (open connections end with their peers).
pub struct SlowLink {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl SlowLink {
    /// A relay to `upstream`, with no delay yet, listening on a port of 127.0.0.1
    /// the system chose.
    pub fn to(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
        let addr = listener.local_addr()?;
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (delay_ms.clone(), stop.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let d = d.clone();
                thread::spawn(move || relay(client, upstream, d));
            }
        });
        Ok(Self {
            addr,
            delay_ms,
            stop,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, what a client sends waits `delay` before it is forwarded.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Forwards both ways until either side closes; the client's bytes wait the delay.
fn relay(client: TcpStream, upstream: SocketAddr, delay_ms: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_w), Ok(server_r)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = thread::spawn(move || copy(server_r, client_w, None));
    copy(client, server, Some(delay_ms));
    let _ = back.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream, delay_ms: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(d) = &delay_ms {
            let ms = d.load(Ordering::Relaxed);
            if ms > 0 {
                // The fault itself: this link is slow.
                thread::sleep(Duration::from_millis(ms));
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server; the relay forwards both ways, and holds the client's bytes
    /// only once a delay is set.
    #[test]
    fn forwards_both_ways_and_holds_the_clients_bytes_for_the_delay() {
        let echo = TcpListener::bind("127.0.0.1:0").expect("bind");
        let upstream = echo.local_addr().expect("addr");
        thread::spawn(move || {
            for s in echo.incoming().flatten() {
                thread::spawn(move || {
                    let mut r = s.try_clone().expect("clone");
                    let mut w = s;
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        let link = SlowLink::to(upstream).expect("relay");
        let mut c = TcpStream::connect(link.addr()).expect("connect");
        let mut got = [0u8; 4];
        c.write_all(b"ping").expect("write");
        c.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"ping");

        link.set_delay(Duration::from_millis(300));
        let t = Instant::now();
        c.write_all(b"pong").expect("write");
        c.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"pong");
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
    }
}
