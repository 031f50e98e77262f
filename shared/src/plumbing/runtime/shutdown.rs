//! The shutdown token: one [`CancellationToken`] cancelled once, on SIGTERM or
//! SIGINT or when the process decides to stop; every long-running task holds a
//! clone and drains when it is cancelled.

pub use tokio_util::sync::CancellationToken;

/// The shutdown token of a process.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A token not triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A token the tasks hold: cancelled once shutdown is triggered.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Triggers shutdown (idempotent).
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Whether shutdown was triggered.
    pub fn triggered(&self) -> bool {
        self.token.is_cancelled()
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
    async fn holders_see_the_trigger_once_and_for_good() {
        let shutdown = Shutdown::new();
        let token = shutdown.token();
        assert!(!token.is_cancelled() && !shutdown.triggered());
        let waiting = tokio::spawn({
            let token = token.clone();
            async move { token.cancelled().await }
        });
        shutdown.trigger();
        waiting.await.expect("the waiting task ends");
        assert!(token.is_cancelled() && shutdown.triggered());
        shutdown.trigger();
        // A holder that comes late sees it at once.
        shutdown.token().cancelled().await;
    }
}
