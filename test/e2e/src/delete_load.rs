//! A load generator of DELETEs through the API server, for tests that break
//! holdfast's processes while it runs (`tests/failover.rs`): tokio tasks deleting
//! ConfigMaps of one namespace in rounds, as one client (a user of the test's own).
//! Each round creates fresh unprotected objects, then tries to delete every
//! protected object and every object of the round; each DELETE is tried until it
//! has an answer that counts (deleted, or refused with the exact refusal
//! expected): a refusal because the API server could not call the webhook
//! (`failurePolicy: Fail`) is counted apart and tried again, as a client retries a
//! 500. Rounds go on until [`Load::finish`] says how many more.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};

/// The text of a refusal because the API server could not reach a webhook
/// (kube-apiserver's and the simulator's `failed calling webhook "NAME": ...`).
pub const UNREACHABLE: &str = "failed calling webhook";

/// The start of holdfast's refusal while its rules load (`messages::not_ready`).
pub const NOT_READY: &str = "holdfast: not ready yet";

/// How long one object may go without an answer that counts.
const OBJECT_DEADLINE: Duration = Duration::from_secs(120);

/// How long one request may take before it counts as an error and is tried again.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the load is asked to do.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The namespace of every object.
    pub namespace: String,
    /// Protected objects (they exist before the load): name, and the exact
    /// message of the refusal expected (`admission webhook "..." denied the
    /// request: holdfast: ...`).
    pub protected: Vec<(String, String)>,
    /// Unprotected objects each round creates and deletes.
    pub unprotected_per_round: usize,
    /// Labels of the unprotected objects.
    pub unprotected_labels: BTreeMap<String, String>,
    /// DELETEs in flight at once.
    pub workers: usize,
}

/// Counters, read while the load runs.
#[derive(Debug, Default)]
pub struct Counters {
    /// DELETEs that got an answer that counts (deleted, refused as expected, or
    /// anything wrong).
    pub decided: AtomicU64,
    /// Unprotected objects deleted.
    pub deleted: AtomicU64,
    /// Unprotected objects found gone when deleted after an unanswered attempt.
    pub gone: AtomicU64,
    /// Protected objects refused with the exact refusal expected.
    pub denied: AtomicU64,
    /// Refusals because the API server could not call the webhook.
    pub unreachable: AtomicU64,
    /// holdfast's "not ready yet" refusals.
    pub not_ready: AtomicU64,
    /// Any other failed request (tried again).
    pub other: AtomicU64,
    /// Creates of unprotected objects tried again.
    pub create_retries: AtomicU64,
    /// Rounds finished.
    pub rounds: AtomicU64,
}

/// What the load did.
#[derive(Debug)]
pub struct Report {
    /// Rounds run.
    pub rounds: u64,
    /// Unprotected objects deleted.
    pub deleted: u64,
    /// Unprotected objects found gone after an unanswered attempt.
    pub gone: u64,
    /// Protected objects refused with the exact refusal expected.
    pub denied: u64,
    /// Refusals because a webhook could not be reached.
    pub unreachable: u64,
    /// holdfast's "not ready yet" refusals.
    pub not_ready: u64,
    /// Other failed requests.
    pub other: u64,
    /// Creates tried again.
    pub create_retries: u64,
    /// Everything that must not happen: a protected object deleted, an
    /// unprotected one refused, a refusal other than the one expected, an object
    /// without an answer within its deadline.
    pub wrong: Vec<String>,
    /// The first few messages of other failed requests.
    pub other_messages: Vec<String>,
    /// Latency of each DELETE request answered (allowed or refused as expected).
    pub latencies: Vec<Duration>,
    /// From the start of the load to its end.
    pub wall: Duration,
}

impl Report {
    /// The `p`th percentile (0..=100) of the answered DELETEs' latency.
    pub fn percentile(&self, p: usize) -> Duration {
        percentile(&self.latencies, p)
    }
}

/// The `p`th percentile (nearest rank, 0..=100) of `values`; zero when empty.
pub fn percentile(values: &[Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (p.min(100) * v.len()).div_ceil(100).max(1);
    v[rank - 1]
}

/// The load, running.
pub struct Load {
    counters: Arc<Counters>,
    /// Rounds to run in all; `u64::MAX` until [`Load::finish`].
    last_round: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Report>,
}

impl Load {
    /// Starts the load with `client` (the user's) as `plan` says.
    pub fn start(client: kube::Client, plan: Plan) -> Self {
        let counters = Arc::new(Counters::default());
        let last_round = Arc::new(AtomicU64::new(u64::MAX));
        let task = tokio::spawn(run(client, plan, counters.clone(), last_round.clone()));
        Self {
            counters,
            last_round,
            task,
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// DELETEs answered so far.
    pub fn decided(&self) -> u64 {
        self.counters.decided.load(Ordering::Relaxed)
    }

    /// Runs the round in progress and `more` rounds after it, then ends; the
    /// report.
    pub async fn finish(self, more: u64) -> anyhow::Result<Report> {
        let now = self.counters.rounds.load(Ordering::Acquire);
        self.last_round.store(now + 1 + more, Ordering::Release);
        self.task.await.context("the load generator panicked")
    }
}

/// The rounds, until the `last_round`th.
async fn run(
    client: kube::Client,
    plan: Plan,
    counters: Arc<Counters>,
    last_round: Arc<AtomicU64>,
) -> Report {
    let api: Api<ConfigMap> = Api::namespaced(client, &plan.namespace);
    let started = Instant::now();
    let wrong = Arc::new(Mutex::new(Vec::new()));
    let others = Arc::new(Mutex::new(Vec::new()));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut round = 0u64;
    while round < last_round.load(Ordering::Acquire) {
        let fresh: Vec<String> = (0..plan.unprotected_per_round)
            .map(|i| format!("free-{round}-{i}"))
            .collect();
        create_all(&api, &plan, &fresh, &counters).await;
        // Protected and unprotected interleaved, so each worker meets both.
        let mut targets: Vec<(String, Option<String>)> = Vec::new();
        let mut p = plan.protected.iter();
        let mut u = fresh.iter();
        loop {
            let (a, b) = (p.next(), u.next());
            if a.is_none() && b.is_none() {
                break;
            }
            targets.extend(a.map(|(n, m)| (n.clone(), Some(m.clone()))));
            targets.extend(b.map(|n| (n.clone(), None)));
        }
        let targets = Arc::new(targets);
        let next = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..plan.workers.max(1) {
            let (api, targets, next, counters) =
                (api.clone(), targets.clone(), next.clone(), counters.clone());
            let (wrong, others, latencies) = (wrong.clone(), others.clone(), latencies.clone());
            workers.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let i =
                        usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                    let Some((name, expected)) = targets.get(i) else {
                        break;
                    };
                    let seen =
                        delete_until_answered(&api, name, expected.as_deref(), &counters).await;
                    counters.decided.fetch_add(1, Ordering::Relaxed);
                    if let Some(l) = seen.latency {
                        mine.push(l);
                    }
                    if let Some(w) = seen.wrong
                        && let Ok(mut all) = wrong.lock()
                    {
                        all.push(w);
                    }
                    if let Ok(mut all) = others.lock() {
                        for m in seen.others {
                            if all.len() < 10 {
                                all.push(m);
                            }
                        }
                    }
                }
                if let Ok(mut all) = latencies.lock() {
                    all.extend(mine);
                }
            }));
        }
        for w in workers {
            if let Err(e) = w.await
                && let Ok(mut all) = wrong.lock()
            {
                all.push(format!("a worker panicked: {e}"));
            }
        }
        round += 1;
        counters.rounds.store(round, Ordering::Release);
    }
    let take = |m: &Arc<Mutex<Vec<String>>>| m.lock().map(|v| v.clone()).unwrap_or_default();
    let c = |x: &AtomicU64| x.load(Ordering::Relaxed);
    Report {
        rounds: round,
        deleted: c(&counters.deleted),
        gone: c(&counters.gone),
        denied: c(&counters.denied),
        unreachable: c(&counters.unreachable),
        not_ready: c(&counters.not_ready),
        other: c(&counters.other),
        create_retries: c(&counters.create_retries),
        wrong: take(&wrong),
        other_messages: take(&others),
        latencies: latencies.lock().map(|v| v.clone()).unwrap_or_default(),
        wall: started.elapsed(),
    }
}

/// Creates the round's unprotected objects, `plan.workers` at a time, each tried
/// until it exists.
async fn create_all(api: &Api<ConfigMap>, plan: &Plan, names: &[String], counters: &Counters) {
    for chunk in names.chunks(plan.workers.max(1)) {
        let creates = chunk.iter().map(|name| async move {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(plan.unprotected_labels.clone()),
                    ..Default::default()
                },
                data: Some([("k".to_string(), "v".to_string())].into()),
                ..Default::default()
            };
            let deadline = Instant::now() + OBJECT_DEADLINE;
            loop {
                match tokio::time::timeout(CALL_TIMEOUT, api.create(&PostParams::default(), &cm))
                    .await
                {
                    Ok(Ok(_)) => return,
                    Ok(Err(kube::Error::Api(s))) if s.code == 409 => return,
                    _ if Instant::now() > deadline => return,
                    _ => {
                        counters.create_retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        futures::future::join_all(creates).await;
    }
}

/// What the DELETEs of one object met.
#[derive(Default)]
struct Seen {
    latency: Option<Duration>,
    wrong: Option<String>,
    others: Vec<String>,
}

/// Deletes `name` until an answer counts: for an unprotected object (`expected`
/// `None`) its deletion, for a protected one the refusal `expected`. Refusals
/// because a webhook was unreachable, holdfast's "not ready yet" and other
/// failures are counted and tried again.
async fn delete_until_answered(
    api: &Api<ConfigMap>,
    name: &str,
    expected: Option<&str>,
    counters: &Counters,
) -> Seen {
    let mut seen = Seen::default();
    let deadline = Instant::now() + OBJECT_DEADLINE;
    let mut unanswered = false;
    loop {
        let t = Instant::now();
        let answer =
            tokio::time::timeout(CALL_TIMEOUT, api.delete(name, &DeleteParams::default())).await;
        let took = t.elapsed();
        match (answer, expected) {
            (Ok(Ok(_)), None) => {
                counters.deleted.fetch_add(1, Ordering::Relaxed);
                seen.latency = Some(took);
                return seen;
            }
            (Ok(Ok(_)), Some(_)) => {
                seen.wrong = Some(format!("protected {name} was deleted"));
                return seen;
            }
            (Ok(Err(kube::Error::Api(s))), _) if s.message.contains(UNREACHABLE) => {
                counters.unreachable.fetch_add(1, Ordering::Relaxed);
                unanswered = true;
            }
            (Ok(Err(kube::Error::Api(s))), _) if s.message.contains(NOT_READY) => {
                counters.not_ready.fetch_add(1, Ordering::Relaxed);
            }
            (Ok(Err(kube::Error::Api(s))), Some(want)) if s.code == 403 && s.message == want => {
                counters.denied.fetch_add(1, Ordering::Relaxed);
                seen.latency = Some(took);
                return seen;
            }
            (Ok(Err(kube::Error::Api(s))), None) if s.code == 404 && unanswered => {
                counters.gone.fetch_add(1, Ordering::Relaxed);
                return seen;
            }
            (Ok(Err(kube::Error::Api(s))), _) if s.code == 403 || s.code == 404 => {
                seen.wrong = Some(format!(
                    "{name}: {} {}, expected {}",
                    s.code,
                    s.message,
                    expected.unwrap_or("its deletion")
                ));
                return seen;
            }
            (other, _) => {
                counters.other.fetch_add(1, Ordering::Relaxed);
                unanswered = true;
                seen.others.push(match other {
                    Ok(Err(e)) => format!("{name}: {e}"),
                    Ok(Ok(_)) => format!("{name}: deleted"),
                    Err(_) => format!("{name}: no answer within {CALL_TIMEOUT:?}"),
                });
            }
        }
        if Instant::now() > deadline {
            seen.wrong = Some(format!(
                "{name}: no answer that counts within {OBJECT_DEADLINE:?}"
            ));
            return seen;
        }
        // The pause of a client retrying, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// DELETE reviews answered by the webhook whose probe port is `probe_port` (the
/// sum of `holdfast_webhook_admission_requests_total` over decisions and
/// deciders).
pub async fn delete_reviews(probe_port: u16) -> anyhow::Result<u64> {
    let (status, body) = crate::http_get(probe_port, "/metrics")
        .await
        .map_err(|e| anyhow::anyhow!("GET /metrics: {e}"))?;
    anyhow::ensure!(status == 200, "GET /metrics answered {status}: {body}");
    let mut total = 0;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("holdfast_webhook_admission_requests_total{")
            && let Some((labels, value)) = rest.split_once("} ")
            && labels.split(',').any(|l| l == "operation=\"DELETE\"")
        {
            total += value
                .trim()
                .parse::<u64>()
                .with_context(|| line.to_string())?;
        }
    }
    Ok(total)
}

/// A client acting as the user of `kubeconfig` (impersonation included).
pub async fn client_for(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
    Ok(kube::Client::try_from(cfg)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let v = ms(&[5, 1, 4, 2, 3, 10, 9, 8, 7, 6]);
        assert_eq!(percentile(&v, 50), Duration::from_millis(5));
        assert_eq!(percentile(&v, 99), Duration::from_millis(10));
        assert_eq!(percentile(&v, 0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}
