//! Replicas and failover under load (issue 34, "fleet scale"): two webhook replicas
//! behind a round-robin front (what a Service is to them, `holdfast_e2e::balancer`)
//! and two controllers electing a leader with the shipped `--leader-elect`, all as
//! the manifests ship them (their ServiceAccounts and RBAC, `failurePolicy: Fail`),
//! while a load generator (`holdfast_e2e::delete_load`: a user of the test's own
//! with delete rights, through the API server) deletes protected and unprotected
//! ConfigMaps in rounds. Meanwhile the replica that served most is killed (SIGKILL)
//! and started again, and the leading controller is killed; the follower takes
//! over. No protected object may be deleted, every unprotected one must be, and
//! every protected DELETE is refused with holdfast's message; a refusal because a
//! replica could not be reached is tried again and counted apart.
//!
//! On the simulator, and on a real kube-apiserver under `hack/e2e-on-cluster.sh
//! --backend kube` (the test owns the installation there). Its size:
//! `HOLDFAST_FAILOVER_OBJECTS` (objects per round, half of them protected; 40),
//! `HOLDFAST_FAILOVER_WORKERS` (DELETEs in flight; 8), `HOLDFAST_FAILOVER_ROUNDS`
//! (full rounds after the new leader is ready; 1). The figures are printed
//! (`--nocapture`); `hack/bench-failover.sh` runs it bigger, in release.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::{Duration, Instant},
};

use holdfast_e2e::{
    Env, WebhookProcess,
    balancer::{BackendStats, Front},
    controller::{ControllerProcess, elect, shipped_installation, start_controller},
    delete_load::{self, Load, Plan, Report},
    denied_by, metric, rbac,
    steps::{eventually, refused_exactly_until, wait_ready},
};
use serde_json::Value;

const LABEL_WEBHOOK: &str = "delete-label-0.holdfast.dev";
const POLICIES_WEBHOOK: &str = "policies-0.holdfast.dev";
/// The ResourceProtection over the ConfigMaps labelled `tier=keep`.
const POLICY: &str = "failover-keep";
/// The Lease the shipped controllers elect their leader with.
const LEASE: [&str; 4] = ["lease", "holdfast-controller", "-n", "holdfast-system"];
const RP_LOADED: &str = "holdfast_webhook_registry_policies{kind=\"ResourceProtection\"}";

/// A count from the environment variable `name`, else `default`.
fn knob(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a count: {e}")),
        Err(_) => default,
    }
}

/// holdfast's refusal of the label-protected ConfigMap `ns`/`name`.
fn label_refusal(ns: &str, name: &str) -> String {
    denied_by(
        LABEL_WEBHOOK,
        &format!(
            "holdfast: ConfigMap {ns}/{name} is protected by label holdfast.dev/protected=Always \
             (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove \
             the label (kubectl label configmaps {name} -n {ns} holdfast.dev/protected-), or set the \
             annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    )
}

/// holdfast's refusal of the ConfigMap `ns`/`name` [`POLICY`] selects.
fn policy_refusal(ns: &str, name: &str) -> String {
    denied_by(
        POLICIES_WEBHOOK,
        &format!(
            "holdfast: ConfigMap {ns}/{name} is protected by ResourceProtection/{POLICY} (selects \
             configmaps in namespace {ns} matching its label selector), so it cannot be deleted. \
             To delete it, remove it from the policy (kubectl edit resourceprotection {POLICY}), \
             or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass \
             protection. To have holdfast delete it once nothing blocks it, ask for deferred \
             deletion (holdfast.dev/delete-when-unblocked)."
        ),
    )
}

/// The ConfigMaps `(name, labels)` in `ns`, as one stream of documents for
/// `kubectl create`.
fn configmaps(ns: &str, items: &[(String, Value)]) -> String {
    items
        .iter()
        .map(|(name, labels)| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "data": {"k": "v"}
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the front listens: 127.0.0.1, or every address when the API server of
/// `HOLDFAST_E2E_KUBECONFIG` calls this host at another address.
fn front_ip() -> IpAddr {
    let loopback = IpAddr::from([127, 0, 0, 1]);
    if holdfast_e2e::e2e_cluster().is_none() {
        return loopback;
    }
    match holdfast_e2e::e2e_webhook_host().parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => loopback,
        _ => IpAddr::from([0, 0, 0, 0]),
    }
}

/// One webhook replica: its process while it runs, its port, its log.
struct Replica {
    name: &'static str,
    process: Option<WebhookProcess>,
    port: u16,
    log: PathBuf,
}

impl Replica {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn probe(&self) -> u16 {
        self.process
            .as_ref()
            .map(|w| w.probe_port)
            .unwrap_or_else(|| panic!("replica {} is not running", self.name))
    }

    /// DELETE reviews it answered since it started.
    async fn reviews(&self) -> u64 {
        delete_load::delete_reviews(self.probe())
            .await
            .unwrap_or_else(|e| panic!("replica {}: {e:#}", self.name))
    }

    /// Waits until `/readyz` answers 200: what a readiness probe gates a
    /// Service's endpoints on (the policies listed once, so every policy that
    /// existed when it started).
    async fn wait_ready(&self) {
        let w = self.process.as_ref().expect("running");
        w.wait_ready(60)
            .await
            .unwrap_or_else(|e| panic!("replica {}: {e:#}", self.name));
    }

    /// Waits until it holds the ResourceProtection (applied after it started).
    async fn wait_policy(&self) {
        let probe = self.probe();
        eventually(60, async || match metric(probe, RP_LOADED).await {
            Ok(Some(1.0)) => Ok(()),
            other => Err(format!(
                "replica {} holds no ResourceProtection: {other:?}\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )),
        })
        .await;
    }
}

/// The Lease's holder ("" while it names nobody).
fn lease_holder(env: &Env) -> String {
    let lease = env.get_json(&LEASE).expect("the Lease");
    lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether every webhook of the configuration `holdfast` calls `url` with
/// `failurePolicy: Fail`, the label and policies webhooks among them.
fn routed_through(cfg: Option<&Value>, url: &str) -> bool {
    let hooks = cfg
        .and_then(|c| c["webhooks"].as_array())
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = hooks.iter().filter_map(|h| h["name"].as_str()).collect();
    names.contains(&LABEL_WEBHOOK)
        && names.contains(&POLICIES_WEBHOOK)
        && hooks
            .iter()
            .all(|h| h["clientConfig"]["url"] == url && h["failurePolicy"] == "Fail")
}

/// What the faults left to print.
struct Faults {
    victim: &'static str,
    served_before_kill: [u64; 2],
    survivor_alone: u64,
    replica_down: Duration,
    replica_healthy: Duration,
    replica_ready: Duration,
    restarted_served: u64,
    survivor_after: u64,
    lease_taken: Duration,
    leader_ready: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_protected_object_is_deleted_while_a_replica_and_the_leader_fail() {
    let objects = knob("HOLDFAST_FAILOVER_OBJECTS", 40).max(4);
    let workers = knob("HOLDFAST_FAILOVER_WORKERS", 8).max(1);
    let rounds_after = knob("HOLDFAST_FAILOVER_ROUNDS", 1) as u64;
    let protected_count = objects / 2;
    let unprotected = objects - protected_count;
    let per_round = objects as u64;

    // holdfast as shipped: the overlay, the webhook as its ServiceAccount (replica
    // a), a second replica beside it, the front before both.
    let cfg = holdfast_e2e::with_service_accounts(holdfast_sim::SimConfig::default());
    // Connections recycled every 3 s (the shipped default is 300): the API server's
    // reviews reach a restarted replica within the test.
    const AGE: [&str; 2] = ["--max-connection-age-seconds", "3"];
    let installed = shipped_installation(cfg, &AGE).await.expect("installation");
    let mut env = installed.env;
    let webhook_kc = env
        .kubeconfig_for("kubeconfig-webhook-sa", holdfast_e2e::WEBHOOK_SA)
        .expect("webhook kubeconfig");
    let webhook_args = ["--kubeconfig", webhook_kc.as_str(), AGE[0], AGE[1]];
    let first = env.webhook.take().expect("the harness's webhook");
    let (port, log) = (first.port, first.log.clone());
    let mut a = Replica {
        name: "a",
        process: Some(first),
        port,
        log,
    };
    let log_b = env.dir.path().join("webhook-b.log");
    let port_b = holdfast_e2e::free_port().expect("port");
    let mut b = Replica {
        name: "b",
        process: Some(
            env.spawn_webhook(port_b, &webhook_args, &log_b)
                .await
                .expect("replica b"),
        ),
        port: port_b,
        log: log_b,
    };
    let front = Front::start(front_ip(), &[a.addr(), b.addr()]).expect("front");
    let url = format!(
        "https://{}:{}/validate",
        if env.cluster.is_some() {
            holdfast_e2e::e2e_webhook_host()
        } else {
            "127.0.0.1".to_string()
        },
        front.addr().port()
    );

    // Half the objects protected, by label and by a ResourceProtection.
    let ns = env.namespace("failover").expect("namespace");
    let mut protected = Vec::new();
    let mut manifests = Vec::new();
    for i in 0..protected_count {
        let (name, labels, refusal) = if i % 2 == 0 {
            let name = format!("keep-label-{i}");
            let refusal = label_refusal(&ns, &name);
            (
                name,
                serde_json::json!({"holdfast.dev/protected": "Always"}),
                refusal,
            )
        } else {
            let name = format!("keep-policy-{i}");
            let refusal = policy_refusal(&ns, &name);
            (name, serde_json::json!({"tier": "keep"}), refusal)
        };
        manifests.push((name.clone(), labels));
        protected.push((name, refusal));
    }
    env.kubectl_stdin(&["create", "-f", "-"], &configmaps(&ns, &manifests))
        .expect("kubectl")
        .ok()
        .expect("protected objects");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {POLICY}}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {ns}, \
         labelSelector: {{matchLabels: {{tier: keep}}}}}}\n"
    ))
    .expect("ResourceProtection");

    // Two controllers as their ServiceAccount, with the shipped flags; one leads.
    let controller_args = [
        "--kubeconfig",
        installed.controller_kubeconfig.as_str(),
        "--leader-elect",
        "--failure-policy=Fail",
    ];
    let start = |name: &str| {
        start_controller(&env, name, front.addr().port(), &controller_args).expect("controller")
    };
    let (mut c1, mut c2): (ControllerProcess, ControllerProcess) =
        (start("controller-1"), start("controller-2"));
    let (leader, follower) = elect(&mut c1, &mut c2).await;
    holdfast_e2e::controller::wait_configuration(&env, Duration::from_secs(60), |c| {
        routed_through(c, &url)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nleader: {}", leader.log()));
    wait_ready(&env, "resourceprotection", POLICY).await;
    for r in [&a, &b] {
        r.wait_ready().await;
        r.wait_policy().await;
    }
    // Both kinds refused as holdfast words it, through the front.
    for (name, refusal) in protected.iter().take(2) {
        refused_exactly_until(
            &env,
            &["delete", "configmap", name, "-n", &ns, "--dry-run=server"],
            &format!("Error from server (Forbidden): {refusal}\n"),
        )
        .await;
    }

    // The load: a user of the test's own who may create and delete ConfigMaps
    // there, nothing else. The unprotected objects carry the label with a value
    // that protects nothing (their protection switched off), so every DELETE of
    // the load is a review some replica answers.
    let loader = env.test_user("loader", &[]).expect("user");
    env.grant_in(
        &ns,
        "loader",
        &[rbac::user(&loader.name)],
        &[rbac::rule(
            &["get", "list", "create", "delete"],
            &[""],
            &["configmaps"],
        )],
    )
    .expect("grant");
    let client = delete_load::client_for(&loader.kubeconfig)
        .await
        .expect("the loader's client");
    let baseline = [a.reviews().await, b.reviews().await];
    let load = Load::start(
        client,
        Plan {
            namespace: ns.clone(),
            protected: protected.clone(),
            unprotected_per_round: unprotected,
            unprotected_labels: BTreeMap::from([(
                "holdfast.dev/protected".to_string(),
                "false".to_string(),
            )]),
            workers,
        },
    );
    let faults = break_things(
        &env,
        &load,
        [&mut a, &mut b],
        baseline,
        &front,
        (leader, follower),
        (&webhook_args, per_round, &url),
    )
    .await;
    let report = load.finish(rounds_after).await.expect("the load");
    let relayed = [a.addr(), b.addr()].map(|r| front.stats(r).expect("a backend"));
    check_and_print(
        &env,
        &ns,
        &protected,
        unprotected,
        &report,
        &faults,
        (workers, relayed, front.unserved()),
    );
}

/// The faults, each once the load has gone on far enough (conditions, never
/// times): the replica that served most dies and, once the other has served half
/// a round alone, starts again; then the leader dies and the follower must lead.
async fn break_things(
    env: &Env,
    load: &Load,
    replicas: [&mut Replica; 2],
    baseline: [u64; 2],
    front: &Front,
    (leader, follower): (&mut ControllerProcess, &mut ControllerProcess),
    (webhook_args, per_round, url): (&[&str], u64, &str),
) -> Faults {
    let half = (per_round / 2).max(1);
    let decided_past = async |n: u64, what: &str| {
        eventually(180, async || {
            if load.decided() >= n {
                return Ok(());
            }
            Err(format!(
                "{what}: {} of {n} DELETEs answered",
                load.decided()
            ))
        })
        .await
    };
    decided_past(half, "the load before the kill").await;
    let served_before_kill = [
        replicas[0].reviews().await - baseline[0],
        replicas[1].reviews().await - baseline[1],
    ];
    let v = usize::from(served_before_kill[1] > served_before_kill[0]);
    // The replica killed is one the load was going through.
    assert!(
        served_before_kill[v] > 0,
        "no replica served the load: {served_before_kill:?}"
    );
    let [r0, r1] = replicas;
    let (victim, survivor) = if v == 0 { (r0, r1) } else { (r1, r0) };
    let survivor_at_kill = survivor.reviews().await;
    let decided_at_kill = load.decided();
    // SIGKILL: no drain, as a node or a pod's OOM kill ends it.
    drop(victim.process.take());
    let killed = Instant::now();
    // The survivor serves alone while the load goes on.
    eventually(180, async || {
        let served = survivor.reviews().await - survivor_at_kill;
        if served >= half && load.decided() >= decided_at_kill + half {
            return Ok(());
        }
        Err(format!(
            "replica {} served {served} DELETEs alone, {} answered in all since the kill",
            survivor.name,
            load.decided() - decided_at_kill
        ))
    })
    .await;
    let survivor_alone = survivor.reviews().await - survivor_at_kill;
    // Back on its port, listed again once ready (as a Service's endpoints do).
    front.set_listed(victim.addr(), false).expect("unlist");
    let restarting = Instant::now();
    victim.process = Some(
        env.spawn_webhook(victim.port, webhook_args, &victim.log)
            .await
            .expect("the replica starts again"),
    );
    let replica_healthy = restarting.elapsed();
    // Listed once ready, as its endpoint would be: from its first answer on, the
    // load checks it refuses as the others do.
    victim.wait_ready().await;
    let replica_ready = restarting.elapsed();
    front.set_listed(victim.addr(), true).expect("list");
    let replica_down = killed.elapsed();
    let survivor_at_restart = survivor.reviews().await;
    let decided_at_restart = load.decided();
    decided_past(decided_at_restart + half, "the load after the restart").await;

    // The leader dies without releasing the Lease; the follower must take it.
    assert!(!follower.is_ready().await, "the follower does not lead yet");
    let holder = lease_holder(env);
    assert!(
        !holder.is_empty() && leader.log().contains(&holder),
        "the Lease names the leader: {holder:?}\n{}",
        leader.log()
    );
    leader.kill();
    let killed = Instant::now();
    let mut lease_taken = None;
    let leader_ready = eventually(120, async || {
        let now = lease_holder(env);
        if lease_taken.is_none() && !now.is_empty() && now != holder {
            lease_taken = Some(killed.elapsed());
        }
        if follower.is_ready().await {
            return Ok(killed.elapsed());
        }
        Err(format!(
            "the follower leads not yet (Lease holder {now:?}):\n{}",
            follower.log()
        ))
    })
    .await;
    let new_holder = lease_holder(env);
    assert_ne!(new_holder, holder, "the Lease changed hands");
    assert!(
        follower.log().contains(&new_holder),
        "the Lease names the follower: {new_holder}\n{}",
        follower.log()
    );
    // The new leader keeps the configuration on the front.
    holdfast_e2e::controller::wait_configuration(env, Duration::from_secs(30), |c| {
        routed_through(c, url)
    })
    .await
    .expect("the configuration still calls the front");
    decided_past(load.decided() + half, "the load after the failover").await;
    Faults {
        victim: victim.name,
        served_before_kill,
        survivor_alone,
        replica_down,
        replica_healthy,
        replica_ready,
        restarted_served: victim.reviews().await,
        survivor_after: survivor.reviews().await - survivor_at_restart,
        lease_taken: lease_taken.unwrap_or(leader_ready),
        leader_ready,
    }
}

/// The assertions on what the load met and left, and the figures.
fn check_and_print(
    env: &Env,
    ns: &str,
    protected: &[(String, String)],
    unprotected: usize,
    report: &Report,
    faults: &Faults,
    (workers, relayed, unserved): (usize, [BackendStats; 2], u64),
) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let secs = |d: Duration| d.as_secs_f64();
    let (v, other) = if faults.victim == "a" {
        ("a", "b")
    } else {
        ("b", "a")
    };
    let [served_a, served_b] = faults.served_before_kill;
    println!(
        "failover: {} objects a round ({} protected, {unprotected} unprotected), {workers} workers, \
         {} rounds, wall time {:.1} s",
        protected.len() + unprotected,
        protected.len(),
        report.rounds,
        secs(report.wall),
    );
    println!(
        "failover: {} DELETEs answered: {} unprotected deleted ({} found gone after an unanswered \
         try), {} protected refused by holdfast",
        report.deleted + report.gone + report.denied,
        report.deleted,
        report.gone,
        report.denied,
    );
    println!(
        "failover: tried again: {} refused because a replica was unreachable, {} holdfast not \
         ready, {} other failed requests",
        report.unreachable, report.not_ready, report.other,
    );
    println!(
        "failover: DELETE latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(report.percentile(50)),
        ms(report.percentile(99)),
        ms(report.percentile(100)),
    );
    println!(
        "failover: replica {v} killed after the load's first DELETEs (a served {served_a}, b \
         {served_b}); {other} served {} alone; {v} listed again {:.1} s after the kill (healthy \
         {:.1} s, ready {:.1} s after its start), then served {} ({other} {})",
        faults.survivor_alone,
        secs(faults.replica_down),
        secs(faults.replica_healthy),
        secs(faults.replica_ready),
        faults.restarted_served,
        faults.survivor_after,
    );
    println!(
        "failover: the front relayed {} connections to a ({} connects failed), {} to b ({} \
         failed), none served {}",
        relayed[0].relayed, relayed[0].failed, relayed[1].relayed, relayed[1].failed, unserved,
    );
    println!(
        "failover: leader killed: the Lease taken {:.1} s, the new leader ready {:.1} s after the \
         kill",
        secs(faults.lease_taken),
        secs(faults.leader_ready),
    );
    if !report.other_messages.is_empty() {
        println!(
            "failover: other failed requests (first ones): {:#?}",
            report.other_messages
        );
    }
    assert!(
        report.wrong.is_empty(),
        "what must not happen: {:#?}",
        report.wrong
    );
    assert!(
        faults.restarted_served > 0,
        "the restarted replica got no review: its peer's connections were not recycled"
    );
    assert_eq!(
        report.denied,
        report.rounds * protected.len() as u64,
        "every protected DELETE of every round refused by holdfast"
    );
    assert_eq!(
        report.deleted + report.gone,
        report.rounds * unprotected as u64,
        "every unprotected object of every round deleted"
    );
    let left = env.get_json(&["configmaps", "-n", ns]).expect("configmaps");
    let names: Vec<&str> = left["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    for (name, _) in protected {
        assert!(
            names.contains(&name.as_str()),
            "protected {name} is gone: {names:?}"
        );
    }
    let strays: Vec<&&str> = names.iter().filter(|n| n.starts_with("free-")).collect();
    assert!(strays.is_empty(), "unprotected objects left: {strays:?}");
}
