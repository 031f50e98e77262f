//! A front for several webhook replicas, as a Kubernetes Service is one: a TCP
//! relay on a port the system chose that hands each connection to the next listed
//! backend in turn (TLS stays end to end, so the replicas' certificate must name
//! the host the API server dials), skipping a backend whose connect fails, as
//! endpoints drop a dead pod. A backend taken off the list ([`Front::set_listed`])
//! gets no new connection, as a pod that is not ready leaves the endpoints; the
//! connections it holds go on until either side closes them.

use std::{
    io::{Read, Write},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::Context;

/// How long a backend has to accept a connection before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One backend and what the front did with it.
struct Backend {
    addr: SocketAddr,
    listed: AtomicBool,
    /// Connections relayed to it.
    relayed: AtomicU64,
    /// Connects that failed (the backend skipped).
    failed: AtomicU64,
}

struct Shared {
    backends: Vec<Backend>,
    next: AtomicUsize,
    /// Client connections closed because no listed backend accepted.
    unserved: AtomicU64,
    stop: AtomicBool,
}

/// The front; dropping it stops accepting (open connections end with their peers).
pub struct Front {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the front did with one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendStats {
    /// Connections relayed to it.
    pub relayed: u64,
    /// Connects that failed, after which the next backend was tried.
    pub failed: u64,
}

impl Front {
    /// A front listening on `ip` (127.0.0.1, or every address for an API server
    /// elsewhere) at a port the system chose, every backend of `backends` listed.
    pub fn start(ip: IpAddr, backends: &[SocketAddr]) -> anyhow::Result<Self> {
        anyhow::ensure!(!backends.is_empty(), "a front needs a backend");
        let listener = TcpListener::bind((ip, 0)).context("binding the front")?;
        let mut addr = listener.local_addr()?;
        if addr.ip().is_unspecified() {
            addr.set_ip(IpAddr::from([127, 0, 0, 1]));
        }
        let shared = Arc::new(Shared {
            backends: backends
                .iter()
                .map(|&addr| Backend {
                    addr,
                    listed: AtomicBool::new(true),
                    relayed: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
            unserved: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        thread::Builder::new()
            .name("front-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let s = s.clone();
                    thread::spawn(move || serve(client, &s));
                }
            })?;
        Ok(Self { addr, shared })
    }

    /// Where clients connect (127.0.0.1 when the front listens on every address).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn backend(&self, addr: SocketAddr) -> anyhow::Result<&Backend> {
        self.shared
            .backends
            .iter()
            .find(|b| b.addr == addr)
            .with_context(|| format!("{addr} is no backend of this front"))
    }

    /// Lists `backend` (it takes new connections) or takes it off the list.
    pub fn set_listed(&self, backend: SocketAddr, listed: bool) -> anyhow::Result<()> {
        let b = self.backend(backend)?;
        b.listed.store(listed, Ordering::Release);
        Ok(())
    }

    /// What the front did with `backend` so far.
    pub fn stats(&self, backend: SocketAddr) -> anyhow::Result<BackendStats> {
        let b = self.backend(backend)?;
        Ok(BackendStats {
            relayed: b.relayed.load(Ordering::Relaxed),
            failed: b.failed.load(Ordering::Relaxed),
        })
    }

    /// Client connections closed because no listed backend accepted them.
    pub fn unserved(&self) -> u64 {
        self.shared.unserved.load(Ordering::Relaxed)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Hands `client` to the first listed backend, from the next in turn, that
/// accepts; closes it when none does.
fn serve(client: TcpStream, shared: &Shared) {
    let n = shared.backends.len();
    let first = shared.next.fetch_add(1, Ordering::Relaxed);
    for i in 0..n {
        let b = &shared.backends[(first + i) % n];
        if !b.listed.load(Ordering::Acquire) {
            continue;
        }
        match TcpStream::connect_timeout(&b.addr, CONNECT_TIMEOUT) {
            Ok(server) => {
                b.relayed.fetch_add(1, Ordering::Relaxed);
                relay(client, server);
                return;
            }
            Err(_) => {
                b.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    shared.unserved.fetch_add(1, Ordering::Relaxed);
    let _ = client.shutdown(Shutdown::Both);
}

/// Forwards both ways until either side closes.
fn relay(client: TcpStream, server: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_w), Ok(server_r)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = thread::spawn(move || copy(server_r, client_w));
    copy(client, server);
    let _ = back.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // Both directions end: a backend that dies closes its client's connection,
    // as the API server sees when a pod behind a Service goes.
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that writes `tag` to every connection and closes it.
    fn tagged(tag: u8) -> (SocketAddr, TcpListener) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let accept = l.try_clone().expect("clone");
        thread::spawn(move || {
            for mut s in accept.incoming().flatten() {
                let _ = s.write_all(&[tag]);
            }
        });
        (addr, l)
    }

    /// What a connection through the front reads: the backend's tag, or nothing
    /// when the front found no backend.
    fn ask(front: &Front) -> Option<u8> {
        let mut c = TcpStream::connect(front.addr()).expect("connect");
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        got.first().copied()
    }

    #[test]
    fn connections_go_round_robin_and_skip_an_unlisted_or_dead_backend() {
        let (a, _la) = tagged(b'a');
        let (b, _lb) = tagged(b'b');
        // A port nobody listens on: its connects fail.
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr")
        };
        let front = Front::start(IpAddr::from([127, 0, 0, 1]), &[a, b, dead]).expect("front");
        let answers: Vec<_> = (0..6).map(|_| ask(&front)).collect();
        // Every connection is served; the dead backend's turns go to the next.
        assert!(answers.iter().all(Option::is_some), "{answers:?}");
        let by = |t: u8| answers.iter().filter(|x| **x == Some(t)).count();
        assert!(by(b'a') >= 2 && by(b'b') >= 2, "{answers:?}");
        assert_eq!(front.stats(dead).expect("dead").relayed, 0);
        assert_eq!(front.stats(dead).expect("dead").failed, 2);

        front.set_listed(a, false).expect("a");
        let relayed_a = front.stats(a).expect("a").relayed;
        for _ in 0..4 {
            assert_eq!(ask(&front), Some(b'b'));
        }
        assert_eq!(front.stats(a).expect("a").relayed, relayed_a, "unlisted");

        front.set_listed(b, false).expect("b");
        assert_eq!(ask(&front), None, "no backend left: the connection closes");
        assert_eq!(front.unserved(), 1);
        let stranger = SocketAddr::new(IpAddr::from([127, 0, 0, 2]), 1);
        assert!(front.set_listed(stranger, true).is_err());
    }
}
