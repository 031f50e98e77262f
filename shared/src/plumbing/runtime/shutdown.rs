//! The shutdown token: one `watch` channel that turns `true` once, on SIGTERM
//! or SIGINT or when the process decides to stop; every long-running task
//! holds a receiver and drains when it changes.

use tokio::sync::watch;

/// The shutdown token.
#[derive(Debug)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A token not triggered yet.
    pub fn new() -> Self {
        Self {
            tx: watch::Sender::new(false),
        }
    }

    /// A receiver that sees `true` once shutdown is triggered.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    /// Triggers shutdown (idempotent).
    pub fn trigger(&self) {
        self.tx
            .send_if_modified(|stop| !std::mem::replace(stop, true));
    }

    /// Whether shutdown was triggered.
    pub fn triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Waits for SIGTERM or SIGINT, logs it and triggers shutdown.
    pub async fn on_signal(&self) {
        signal().await;
        tracing::info!("termination signal received; shutting down");
        self.trigger();
    }
}

/// Waits for SIGTERM or SIGINT.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn receivers_see_the_trigger_once() {
        let token = Shutdown::new();
        let mut rx = token.receiver();
        assert!(!*rx.borrow() && !token.triggered());
        token.trigger();
        rx.changed().await.expect("sender alive");
        assert!(*rx.borrow() && token.triggered());
        token.trigger();
        assert!(
            !rx.has_changed().expect("sender alive"),
            "a second trigger is no change"
        );
    }
}
