//! Background controllers: namespace lifecycle, garbage collection, CRD
//! establishment and cleanup, root CA publishing; plus post-write hooks.

use crate::api::{self, Call, DeleteCall, Mutation, Target};
use crate::errors::ApiResult;
use crate::registry::{self, Gr, ResourceInfo};
use crate::server::{Ctx, Resp, State, UserInfo};
use crate::store::Key;
use crate::{kcp, now_rfc3339};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub fn crd_gr() -> Gr {
    Gr {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
    }
}

pub fn ns_gr() -> Gr {
    Gr {
        group: String::new(),
        resource: "namespaces".into(),
    }
}

/// The identity the simulated controllers act as (kube-controller-manager in the
/// captures ran with the admin credentials).
pub fn controller_user(state: &State) -> UserInfo {
    let u = state
        .cfg
        .users
        .iter()
        .find(|u| u.groups.iter().any(|g| g == "system:masters"))
        .cloned()
        .unwrap_or(crate::User {
            name: "admin".into(),
            token: String::new(),
            groups: vec!["system:masters".into()],
            uid: None,
        });
    let mut groups = u.groups.clone();
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    UserInfo {
        uid: crate::user_uid(&u.name),
        name: u.name,
        groups,
        extra: Default::default(),
    }
}

pub fn info_for(state: &State, cluster: &str, gr: &Gr) -> Option<Arc<ResourceInfo>> {
    state
        .registry
        .resources(cluster)
        .into_iter()
        .find(|i| i.group == gr.group && i.resource == gr.resource)
}

pub(crate) fn target(info: &Arc<ResourceInfo>, ns: Option<&str>, name: Option<&str>) -> Target {
    Target {
        info: info.clone(),
        version: info.versions.first().cloned().unwrap_or_default(),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        sub: None,
    }
}

/// A change the simulator's controllers make to a stored object (its result is theirs
/// to ignore: the next event retries).
pub(crate) async fn change(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    f: impl Fn(&mut Value) + Send + Sync + 'static,
) {
    let _ = api::update(
        Call::new(state, ctx, t, cluster),
        &HashMap::new(),
        Mutation::Func(Box::new(f)),
    )
    .await;
}

/// A controller's DELETE of `name` with propagation policy `propagation`.
async fn remove(c: Call<'_>, name: &str, propagation: &str, how: DeleteCall) -> ApiResult<Resp> {
    api::delete(c, name, &delete_options(propagation), how).await
}

/// Keeps the items of the list at `pointer` in `o` that `keep` accepts.
fn retain(o: &mut Value, pointer: &str, keep: impl FnMut(&Value) -> bool) {
    if let Some(a) = o.pointer_mut(pointer).and_then(|a| a.as_array_mut()) {
        a.retain(keep);
    }
}

/// The DeleteOptions a controller deletes with.
fn delete_options(propagation: &str) -> Value {
    json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": propagation})
}

pub fn set_condition(obj: &mut Value, ty: &str, status: &str, reason: &str, message: &str) {
    let now = now_rfc3339();
    if !obj.is_object() {
        return;
    }
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    if let Some(conds) = obj["status"]["conditions"].as_array_mut() {
        let c = json!({"type": ty, "status": status, "lastTransitionTime": now, "reason": reason, "message": message});
        match conds.iter_mut().find(|c| c["type"] == ty) {
            Some(existing) => {
                if existing["status"] != status {
                    *existing = c;
                } else {
                    existing["reason"] = json!(reason);
                    existing["message"] = json!(message);
                }
            }
            None => conds.push(c),
        }
    }
}

/// Creates the initial objects: default namespaces and the kcp root logical cluster.
pub async fn bootstrap(state: &Arc<State>) {
    let now = now_rfc3339();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let obj = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now,
                         "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        let _ = state.store.create(
            &ns_gr(),
            Key {
                cluster: String::new(),
                namespace: String::new(),
                name: ns.into(),
            },
            obj,
        );
        if state.cfg.default_service_accounts {
            let sa = json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now},
            });
            let _ = state.store.create(
                &Gr {
                    group: String::new(),
                    resource: "serviceaccounts".into(),
                },
                Key {
                    cluster: String::new(),
                    namespace: ns.into(),
                    name: "default".into(),
                },
                sa,
            );
        }
        if state.cfg.root_ca_configmap {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt", "namespace": ns, "uid": uuid::Uuid::new_v4().to_string(),
                             "creationTimestamp": now, "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                "data": {"ca.crt": state.ca_pem},
            });
            let _ = state.store.create(
                &Gr {
                    group: String::new(),
                    resource: "configmaps".into(),
                },
                Key {
                    cluster: String::new(),
                    namespace: ns.into(),
                    name: "kube-root-ca.crt".into(),
                },
                cm,
            );
        }
    }
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now,
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "internalTrafficPolicy": "Cluster",
                 "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": state.addr.port()}],
                 "sessionAffinity": "None", "type": "ClusterIP"},
        "status": {"loadBalancer": {}},
    });
    let _ = state.store.create(
        &Gr {
            group: String::new(),
            resource: "services".into(),
        },
        Key {
            cluster: String::new(),
            namespace: "default".into(),
            name: "kubernetes".into(),
        },
        svc,
    );
    kcp::bootstrap(state);
}

/// Hook run after every successful write. May return a newer version of the object
/// (e.g. a CRD with its status set) to hand back to the client.
pub fn after_write<'a>(
    state: &'a Arc<State>,
    info: &'a ResourceInfo,
    cluster: &'a str,
    old: Option<&'a Arc<Value>>,
    new: Option<&'a Arc<Value>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Arc<Value>>> + Send + 'a>> {
    Box::pin(async move {
        let mut out = None;
        match (info.group.as_str(), info.resource.as_str()) {
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                if let Some(n) = new
                    && n["metadata"]["deletionTimestamp"].is_null()
                {
                    out = establish_crd(state, cluster, n);
                }
                refresh_dynamic(state, cluster);
            }
            ("rbac.authorization.k8s.io", "clusterroles") => {
                let st = state.clone();
                let cluster = cluster.to_string();
                tokio::spawn(async move { aggregate_cluster_roles(&st, &cluster).await });
            }
            ("", "namespaces") => {
                if old.is_none()
                    && let Some(n) = new
                {
                    let st = state.clone();
                    let ns = n["metadata"]["name"].as_str().unwrap_or("").to_string();
                    let cluster = cluster.to_string();
                    tokio::spawn(async move {
                        if cluster.is_empty() && st.cfg.root_ca_configmap {
                            publish_root_ca(&st, &ns).await;
                        }
                        if st.cfg.default_service_accounts {
                            create_default_sa(&st, &cluster, &ns).await;
                        }
                    });
                }
            }
            ("apps", "deployments" | "statefulsets" | "replicasets" | "daemonsets") => {
                if let Some(n) = new
                    && state.cfg.workload_status
                    && n["metadata"]["deletionTimestamp"].is_null()
                    && n["metadata"]["generation"] != n["status"]["observedGeneration"]
                {
                    let st = state.clone();
                    let info = Arc::new(info.clone());
                    let cluster = cluster.to_string();
                    let ns = n["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let name = n["metadata"]["name"].as_str().unwrap_or("").to_string();
                    tokio::spawn(
                        async move { workload_status(&st, &info, &cluster, &ns, &name).await },
                    );
                }
            }
            _ => {}
        }
        // Garbage collection follow-ups.
        let gc_obj = match (old, new) {
            (Some(o), None) => Some(o.clone()),
            (_, Some(n))
                if n["metadata"]["finalizers"].as_array().is_some_and(|f| {
                    f.iter().any(|x| x == "orphan" || x == "foregroundDeletion")
                }) =>
            {
                Some(n.clone())
            }
            _ => None,
        };
        if let Some(o) = gc_obj {
            let key = Key {
                cluster: cluster.to_string(),
                namespace: if info.namespaced {
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                } else {
                    String::new()
                },
                name: o["metadata"]["name"].as_str().unwrap_or("").to_string(),
            };
            let uid = o["metadata"]["uid"].as_str().unwrap_or("");
            if !state.store.dependents(uid).is_empty() || new.is_some() {
                state.gc_requeue(info.gr(), key, o);
            }
        }
        if let Some(o) = kcp::after_write(state, info, cluster, old, new).await {
            out = Some(o);
        }
        if new.is_none_or(|n| !n["metadata"]["deletionTimestamp"].is_null()) {
            state.kick.notify_one();
        }
        out
    })
}

fn establish_crd(state: &State, cluster: &str, crd: &Arc<Value>) -> Option<Arc<Value>> {
    let mut n = (**crd).clone();
    if !n["status"].is_object() {
        n["status"] = json!({});
    }
    let mut names = n["spec"]["names"].clone();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if names["singular"].is_null() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].is_null() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    if n["status"]["acceptedNames"] == names
        && n["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
    {
        return None;
    }
    n["status"]["acceptedNames"] = names;
    set_condition(
        &mut n,
        "NamesAccepted",
        "True",
        "NoConflicts",
        "no conflicts found",
    );
    set_condition(
        &mut n,
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    let storage: Vec<Value> = n["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool().unwrap_or(false))
        .map(|v| v["name"].clone())
        .collect();
    let mut stored = n["status"]["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for s in storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    n["status"]["storedVersions"] = json!(stored);
    let key = Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: n["metadata"]["name"].as_str().unwrap_or("").to_string(),
    };
    state
        .store
        .update(&crd_gr(), &key, n, crate::store::rv_of(crd))
        .ok()
}

/// Recomputes the CRD- and APIBinding-provided kinds of a logical cluster.
pub fn refresh_dynamic(state: &State, cluster: &str) {
    let mut infos: Vec<Arc<ResourceInfo>> = vec![];
    for crd in state.store.list(&crd_gr(), Some(cluster), None).0 {
        if let Some(i) = registry::info_from_crd(&crd) {
            infos.push(Arc::new(i));
        }
    }
    if !cluster.is_empty() {
        for i in kcp::bound_infos(state, cluster) {
            if !infos
                .iter()
                .any(|x| x.group == i.group && x.resource == i.resource)
            {
                infos.push(i);
            }
        }
    }
    state.registry.set_dynamic(cluster, infos);
}

async fn publish_root_ca(state: &Arc<State>, ns: &str) {
    let Some(info) = info_for(
        state,
        "",
        &Gr {
            group: String::new(),
            resource: "configmaps".into(),
        },
    ) else {
        return;
    };
    let ctx = Ctx::internal(controller_user(state), "");
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
        "data": {"ca.crt": state.ca_pem},
    });
    let t = target(&info, Some(ns), None);
    let _ = api::create(Call::new(state, &ctx, &t, ""), obj, &HashMap::new()).await;
}

/// What the workload controllers would report once all replicas run: observedGeneration,
/// replica counts and (for Deployments) Available/Progressing conditions.
async fn workload_status(
    state: &Arc<State>,
    info: &Arc<ResourceInfo>,
    cluster: &str,
    ns: &str,
    name: &str,
) {
    let ctx = Ctx::internal(controller_user(state), cluster);
    let mut t = target(info, Some(ns), Some(name));
    t.sub = Some("status".into());
    let resource = info.resource.clone();
    change(state, &ctx, &t, cluster, move |o: &mut Value| {
        let replicas = o["spec"]["replicas"].as_i64().unwrap_or(1);
        let generation = o["metadata"]["generation"].clone();
        if !o["status"].is_object() {
            o["status"] = json!({});
        }
        let st = &mut o["status"];
        st["observedGeneration"] = generation;
        if resource == "daemonsets" {
            for f in ["currentNumberScheduled", "desiredNumberScheduled", "numberAvailable", "numberReady", "updatedNumberScheduled"] {
                st[f] = json!(1);
            }
            st["numberMisscheduled"] = json!(0);
            return;
        }
        for f in ["replicas", "readyReplicas", "availableReplicas", "updatedReplicas"] {
            st[f] = json!(replicas);
        }
        if resource == "deployments" {
            let now = now_rfc3339();
            st["conditions"] = json!([
                {"type": "Available", "status": "True", "lastUpdateTime": now, "lastTransitionTime": now,
                 "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                {"type": "Progressing", "status": "True", "lastUpdateTime": now, "lastTransitionTime": now,
                 "reason": "NewReplicaSetAvailable", "message": "ReplicaSet has successfully progressed."}
            ]);
        }
    })
    .await;
}

/// The clusterrole-aggregation controller: every ClusterRole with an
/// aggregationRule carries the union of the rules of the ClusterRoles it selects,
/// kept up to date as they change.
async fn aggregate_cluster_roles(state: &Arc<State>, cluster: &str) {
    let Some(info) = info_for(
        state,
        cluster,
        &Gr {
            group: "rbac.authorization.k8s.io".into(),
            resource: "clusterroles".into(),
        },
    ) else {
        return;
    };
    let ctx = Ctx::internal(controller_user(state), cluster);
    for (name, rules) in crate::rbac::aggregation_updates(state, cluster) {
        let t = target(&info, None, Some(&name));
        let rules = Value::Array(rules);
        change(state, &ctx, &t, cluster, move |o: &mut Value| {
            o["rules"] = rules.clone();
        })
        .await;
    }
}

/// The service-account controller's `default` ServiceAccount in every namespace.
async fn create_default_sa(state: &Arc<State>, cluster: &str, ns: &str) {
    let Some(info) = info_for(
        state,
        cluster,
        &Gr {
            group: String::new(),
            resource: "serviceaccounts".into(),
        },
    ) else {
        return;
    };
    let ctx = Ctx::internal(controller_user(state), cluster);
    let obj =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let t = target(&info, Some(ns), None);
    let _ = api::create(Call::new(state, &ctx, &t, cluster), obj, &HashMap::new()).await;
}

/// The kinds a controller loop found nothing to do in, by the store's last change
/// to them then: the loop skips them while that holds (a scan of every object of
/// a kind on every wake-up was quadratic in a large fleet).
#[derive(Default)]
pub(crate) struct Idle(HashMap<(&'static str, Gr), u64>);

impl Idle {
    /// The objects of `gr` that `pending` (named `what`: one record per loop)
    /// says need work, unless `gr` was found with none and has not changed since.
    pub(crate) fn work(
        &mut self,
        what: &'static str,
        state: &State,
        gr: &Gr,
        pending: impl Fn(&Value) -> bool,
    ) -> Vec<(Key, Arc<Value>)> {
        let at = state.store.changed_at(gr);
        let key = (what, gr.clone());
        if self.0.get(&key) == Some(&at) {
            return vec![];
        }
        let items: Vec<(Key, Arc<Value>)> = state
            .store
            .all_objects(gr)
            .into_iter()
            .filter(|(_, v)| pending(v))
            .collect();
        match items.is_empty() {
            true => self.0.insert(key, at),
            false => self.0.remove(&key),
        };
        items
    }
}

pub fn spawn(state: Arc<State>) {
    tokio::spawn(async move {
        let mut shutdown = state.shutdown_rx.clone();
        let mut backoff: HashMap<(String, String), (Instant, Duration)> = HashMap::new();
        let mut idle = Idle::default();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = state.kick.notified() => {},
                _ = tokio::time::sleep(Duration::from_millis(200)) => {},
            }
            reconcile(&state, &mut backoff, &mut idle).await;
        }
    });
}

async fn reconcile(
    state: &Arc<State>,
    backoff: &mut HashMap<(String, String), (Instant, Duration)>,
    idle: &mut Idle,
) {
    let deleting = |o: &Value| !o["metadata"]["deletionTimestamp"].is_null();
    // CRD cleanup
    for (key, crd) in idle.work("crd cleanup", state, &crd_gr(), deleting) {
        cleanup_crd(state, &key, &crd).await;
    }
    // Namespace lifecycle
    for (key, ns) in idle.work("namespace lifecycle", state, &ns_gr(), deleting) {
        let bk = (key.cluster.clone(), key.name.clone());
        if let Some((at, _)) = backoff.get(&bk)
            && Instant::now() < *at
        {
            continue;
        }
        let done = drain_namespace(state, &key, &ns).await;
        if done {
            backoff.remove(&bk);
        } else {
            let d = backoff
                .get(&bk)
                .map(|(_, d)| (*d * 2).min(Duration::from_secs(5)))
                .unwrap_or(Duration::from_millis(100));
            backoff.insert(bk, (Instant::now() + d, d));
        }
    }
    crate::kcp_deletion::reconcile(state, idle).await;
    gc(state).await;
    kcp::reconcile(state, idle).await;
}

async fn cleanup_crd(state: &Arc<State>, key: &Key, crd: &Arc<Value>) {
    let fin = "customresourcecleanup.apiextensions.k8s.io";
    let has_fin = crd["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == fin));
    if !has_fin {
        return;
    }
    let ctx = Ctx::internal(controller_user(state), &key.cluster);
    if let Some(info) = registry::info_from_crd(crd) {
        let info = Arc::new(info);
        let mut remaining = 0;
        for (k, _) in state
            .store
            .list_keyed(&info.gr(), Some(&key.cluster), None)
            .0
        {
            let t = target(
                &info,
                info.namespaced.then_some(k.namespace.as_str()),
                Some(&k.name),
            );
            let c = Call::new(state, &ctx, &t, &key.cluster);
            let res = remove(c, &k.name, "Background", DeleteCall::Unadmitted).await;
            if res.is_err() || state.store.get(&info.gr(), &k).is_some() {
                remaining += 1;
            }
        }
        if remaining > 0 {
            return;
        }
    }
    let Some(crd_info) = info_for(state, &key.cluster, &crd_gr()) else {
        return;
    };
    let t = target(&crd_info, None, Some(&key.name));
    let f = fin.to_string();
    change(state, &ctx, &t, &key.cluster, move |o: &mut Value| {
        retain(o, "/metadata/finalizers", |x| x != f.as_str());
    })
    .await;
    refresh_dynamic(state, &key.cluster);
}

/// One pass of the namespace controller; true when the namespace is gone.
async fn drain_namespace(state: &Arc<State>, key: &Key, ns: &Arc<Value>) -> bool {
    let ctx = Ctx::internal(controller_user(state), &key.cluster);
    let opts = delete_options("Background");
    let mut failures = vec![];
    let mut grs = state.store.grs_with_objects_in(&key.cluster, &key.name);
    grs.sort();
    for gr in &grs {
        let Some(info) = info_for(state, &key.cluster, gr) else {
            continue;
        };
        if !info.namespaced {
            continue;
        }
        let t = target(&info, Some(&key.name), None);
        if let Err(e) = api::delete_collection(
            Call::new(state, &ctx, &t, &key.cluster),
            &HashMap::new(),
            &opts,
        )
        .await
        {
            failures.push(format!(
                "Failed to delete all resource types, 1 remaining: {}",
                e.message
            ));
        }
    }
    let remaining: Vec<Gr> = state.store.grs_with_objects_in(&key.cluster, &key.name);
    let nsinfo = api::ns_info(state, &key.cluster);
    let t = target(&nsinfo, None, Some(&key.name));
    if remaining.is_empty() {
        // Finalize: drop the "kubernetes" finalizer and remove the namespace.
        if ns["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty())
        {
            let _ = state.store.delete(&ns_gr(), key, None);
            return true;
        }
        let mut t = t;
        t.sub = Some("finalize".into());
        change(state, &ctx, &t, &key.cluster, |o: &mut Value| {
            o["spec"]["finalizers"] = json!([]);
        })
        .await;
        return false;
    }
    let msg = failures.join("; ");
    let counts: Vec<String> = remaining
        .iter()
        .map(|gr| {
            let n = state.store.count_in_namespace(gr, &key.cluster, &key.name);
            let q = if gr.group.is_empty() {
                gr.resource.clone()
            } else {
                format!("{}.{}", gr.resource, gr.group)
            };
            format!("{q} has {n} resource instances")
        })
        .collect();
    let counts = counts.join(", ");
    let mut n = (**ns).clone();
    set_condition(
        &mut n,
        "NamespaceDeletionDiscoveryFailure",
        "False",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    );
    set_condition(
        &mut n,
        "NamespaceDeletionGroupVersionParsingFailure",
        "False",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    );
    if msg.is_empty() {
        set_condition(
            &mut n,
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        );
    } else {
        set_condition(
            &mut n,
            "NamespaceDeletionContentFailure",
            "True",
            "ContentDeletionFailed",
            &msg,
        );
    }
    set_condition(
        &mut n,
        "NamespaceContentRemaining",
        "True",
        "SomeResourcesRemain",
        &format!("Some resources are remaining: {counts}"),
    );
    if n["status"] != ns["status"] {
        let _ = state
            .store
            .update(&ns_gr(), key, n, crate::store::rv_of(ns));
    }
    false
}

/// Garbage collector: background deletion of dependents whose owners are gone,
/// foreground and orphan finalizers.
async fn gc(state: &Arc<State>) {
    let ctx_for = |c: &str| Ctx::internal(controller_user(state), c);
    let items: Vec<(Gr, Key, Arc<Value>)> = state.gc_candidates();
    for (gr, key, obj) in items {
        let Some(info) = info_for(state, &key.cluster, &gr) else {
            continue;
        };
        let ctx = ctx_for(&key.cluster);
        let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let still_there = state.store.get(&gr, &key);
        let deps = state.store.dependents(&uid);
        let finalizers: Vec<String> = still_there
            .as_ref()
            .and_then(|o| o["metadata"]["finalizers"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        let orphan = finalizers.iter().any(|f| f == "orphan");
        let foreground = finalizers.iter().any(|f| f == "foregroundDeletion");
        let mut pending = false;
        for (dgr, dkey) in deps {
            let Some(dinfo) = info_for(state, &dkey.cluster, &dgr) else {
                continue;
            };
            let ns = dinfo.namespaced.then_some(dkey.namespace.as_str());
            let t = target(&dinfo, ns, Some(&dkey.name));
            if orphan {
                let u = uid.clone();
                change(state, &ctx, &t, &dkey.cluster, move |o: &mut Value| {
                    retain(o, "/metadata/ownerReferences", |r| r["uid"] != u.as_str());
                })
                .await;
                continue;
            }
            if still_there.is_some() && !foreground {
                continue;
            }
            // Delete the dependent only if none of its other owners still exist.
            let Some(dep) = state.store.get(&dgr, &dkey) else {
                continue;
            };
            let other_owner_alive = dep["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["uid"] != uid.as_str())
                .any(|r| state.uid_exists(r["uid"].as_str().unwrap_or("")));
            if other_owner_alive {
                continue;
            }
            pending = true;
            let policy = if foreground {
                "Foreground"
            } else {
                "Background"
            };
            let c = Call::new(state, &ctx, &t, &dkey.cluster);
            let _ = remove(c, &dkey.name, policy, DeleteCall::Named).await;
        }
        if still_there.is_some()
            && (orphan || (foreground && !pending && state.store.dependents(&uid).is_empty()))
        {
            let t = target(
                &info,
                info.namespaced.then_some(key.namespace.as_str()),
                Some(&key.name),
            );
            change(state, &ctx, &t, &key.cluster, |o: &mut Value| {
                retain(o, "/metadata/finalizers", |f| {
                    f != "orphan" && f != "foregroundDeletion"
                });
            })
            .await;
        } else if still_there.is_some() || !state.store.dependents(&uid).is_empty() {
            state.gc_requeue(gr, key, obj);
        }
    }
}
