//! kcp workspace containment in the policy core: a Workspace DELETE is refused
//! while its workspace, or one below it, holds a protected object.

use super::*;
use crate::policy::WorkspaceContents;

/// What deleting the Workspace (or the APIBinding) would delete, or why it cannot
/// be read.
#[derive(Default)]
struct View {
    contents: Vec<WorkspaceContents>,
    bound: Vec<ContainedObject>,
    fails: Option<String>,
    asked: parking_lot::Mutex<Vec<Value>>,
}

impl ClusterIndex for View {
    fn policies_loaded(&self) -> bool {
        true
    }
}

impl ClusterLookup for View {
    fn workspace_contents(
        &self,
        workspace: &Value,
    ) -> impl Future<Output = Result<Vec<WorkspaceContents>, LookupError>> + Send {
        self.asked.lock().push(workspace.clone());
        let r = match &self.fails {
            Some(why) => Err(LookupError::unreadable(why.clone())),
            None => Ok(self.contents.clone()),
        };
        async move { r }
    }
    fn binding_contents(
        &self,
        cluster: &str,
        _binding: &Value,
    ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send {
        let r = match &self.fails {
            Some(why) => Err(LookupError::unreadable(why.clone())),
            None => Ok(self
                .bound
                .iter()
                .filter(|o| crate::policy::logical_cluster(&o.object) == cluster)
                .cloned()
                .collect()),
        };
        async move { r }
    }
}

impl AccessReview for View {}

const WORKSPACE: (&str, &str, &str) = ("tenancy.kcp.io", "workspaces", "Workspace");

fn kcp() -> PolicyConfig {
    PolicyConfig {
        kcp: true,
        ..cfg(false, &[])
    }
}

/// The DELETE of Workspace `team` in `root:org` (logical cluster `lc-org`), whose
/// own logical cluster is `lc-team`.
fn delete_team(extra_annotations: Value) -> AdmissionRequest {
    let mut req = in_cluster(
        delete_review(WORKSPACE, None, None, "team", json!({})),
        "lc-org",
    );
    if let Some(old) = req.old_object.as_mut() {
        old["spec"] =
            json!({"cluster": "lc-team", "URL": "https://shard-1:6443/clusters/root:org:team"});
        if let (Some(a), Some(extra)) = (
            old["metadata"]["annotations"].as_object_mut(),
            extra_annotations.as_object(),
        ) {
            a.extend(extra.clone());
        }
    }
    req
}

fn configmap(cluster: &str, name: &str, labels: Value) -> ContainedObject {
    ContainedObject {
        resource: crate::review::Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
        },
        kind: "ConfigMap".into(),
        object: Arc::new(json!({"metadata": {"name": name, "namespace": "default",
            "labels": labels, "annotations": {"kcp.io/cluster": cluster}}})),
    }
}

fn place(cluster: &str, path: Option<&str>, objects: Vec<ContainedObject>) -> WorkspaceContents {
    WorkspaceContents {
        cluster: cluster.into(),
        path: path.map(str::to_string),
        objects,
        unreadable: None,
    }
}

/// `place` with one ConfigMap `name` labelled `holdfast.dev/protected=value`.
fn holding(cluster: &str, path: Option<&str>, name: &str, value: &str) -> WorkspaceContents {
    place(
        cluster,
        path,
        vec![configmap(
            cluster,
            name,
            json!({"holdfast.dev/protected": value}),
        )],
    )
}

/// ConfigMap `vault` of `lc-team`, protected and marked for break-glass.
fn vault_with_break_glass() -> Arc<Value> {
    Arc::new(json!({"metadata": {"name": "vault", "namespace": "default",
        "labels": {"holdfast.dev/protected": "Always"},
        "annotations": {"kcp.io/cluster": "lc-team", "holdfast.dev/skip-protection": "true"}}}))
}

fn unreadable(cluster: &str, why: &str) -> WorkspaceContents {
    WorkspaceContents {
        cluster: cluster.into(),
        unreadable: Some(why.into()),
        ..WorkspaceContents::default()
    }
}

#[test]
fn a_workspace_holding_a_protected_object_here_or_below_is_refused() {
    let v = View {
        contents: vec![
            place(
                "lc-team",
                Some("root:org:team"),
                vec![
                    configmap("lc-team", "plain", json!({})),
                    configmap(
                        "lc-team",
                        "vault",
                        json!({"holdfast.dev/protected": "Always"}),
                    ),
                ],
            ),
            holding("lc-sub", Some("root:org:team:sub"), "keys", "true"),
        ],
        ..View::default()
    };
    let req = delete_team(json!({}));
    let e = evaluate(&req, &kcp(), &v, now());
    assert_decided(&e, Decider::Containment, "containment");
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::Protected);
    assert_eq!(
        d.blockers,
        vec![
            "ConfigMap default/keys (label) in root:org:team:sub".to_string(),
            "ConfigMap default/vault (label) in root:org:team".to_string(),
        ]
    );
    assert_eq!(
        d.message,
        "holdfast: Workspace root:org:team holds objects that are protected from deletion: \
         ConfigMap default/keys (label) in root:org:team:sub, ConfigMap default/vault (label) \
         in root:org:team (policy: containment), so it cannot be deleted: that would delete \
         them all, unchecked. To delete it, first lift the protection of those objects (or \
         delete them, or set the annotation holdfast.dev/skip-protection=true on each if you \
         are allowed to bypass protection): kcp deletes a workspace's contents past holdfast, \
         so the annotation on the Workspace itself is not honoured while it holds protected \
         objects."
    );
    // The view was handed the stored Workspace (its spec names what it deletes).
    let asked = v.asked.lock().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["spec"]["cluster"], "lc-team");
}

#[test]
fn nothing_protected_allows_and_break_glass_on_a_contained_object_lifts_it() {
    let mut v = View {
        contents: vec![place(
            "lc-team",
            Some("root:org:team"),
            vec![configmap("lc-team", "plain", json!({}))],
        )],
        ..View::default()
    };
    let req = delete_team(json!({}));
    assert_eq!(evaluate(&req, &kcp(), &v, now()).decision, Decision::Allow);
    let mut glass = configmap(
        "lc-team",
        "vault",
        json!({"holdfast.dev/protected": "Always"}),
    );
    glass.object = vault_with_break_glass();
    v.contents[0].objects.push(glass);
    assert_eq!(evaluate(&req, &kcp(), &v, now()).decision, Decision::Allow);
}

#[test]
fn unreadable_contents_or_an_unplaced_holder_refuse() {
    let v = View {
        fails: Some("holdfast-webhook may not list configmaps in workspace lc-team".into()),
        ..View::default()
    };
    let req = delete_team(json!({}));
    let e = evaluate(&req, &kcp(), &v, now());
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::LookupFailed);
    assert!(
        d.message.starts_with(
            "holdfast: cannot verify what Workspace root:org:team holds: holdfast-webhook may \
             not list configmaps in workspace lc-team."
        ),
        "{}",
        d.message
    );
    // A workspace that holds protected objects and cannot be placed in the tree
    // refuses (it may lie below); one that holds none does not.
    let v = View {
        contents: vec![
            place(
                "lc-far",
                None,
                vec![configmap("lc-far", "plain", json!({}))],
            ),
            holding("lc-odd", None, "vault", "true"),
        ],
        ..View::default()
    };
    let e = evaluate(&req, &kcp(), &v, now());
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::LookupFailed);
    assert!(
        d.message
            .contains("the workspaces of logical cluster lc-odd hold protected objects"),
        "{}",
        d.message
    );
    assert!(!d.message.contains("lc-far"), "{}", d.message);

    // One workspace unreadable: what another holds is named first; alone, it refuses.
    let mut v = View {
        contents: vec![
            unreadable(
                "lc-sub",
                "the discovery of workspace lc-sub failed; retry later",
            ),
            holding("lc-team", Some("root:org:team"), "vault", "true"),
        ],
        ..View::default()
    };
    let e = evaluate(&req, &kcp(), &v, now());
    assert_eq!(denied(&e).kind, DenialKind::Protected);
    v.contents.pop();
    let e = evaluate(&req, &kcp(), &v, now());
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::LookupFailed);
    assert!(
        d.message
            .contains("the discovery of workspace lc-sub failed"),
        "{}",
        d.message
    );
}

#[test]
fn outside_kcp_a_workspace_is_no_container_and_break_glass_on_it_is_honoured() {
    let v = View {
        contents: vec![holding("lc-team", Some("root:org:team"), "vault", "Always")],
        ..View::default()
    };
    // Not kcp: a "Workspace" is an ordinary object.
    let req = delete_team(json!({}));
    assert_eq!(
        evaluate(&req, &cfg(false, &[]), &v, now()).decision,
        Decision::Allow
    );
    // Outside kcp the break-glass marker on it is honoured as on any object.
    let req = delete_team(json!({"holdfast.dev/skip-protection": "true"}));
    let e = evaluate(&req, &cfg(false, &[]), &v, now());
    assert_eq!(e.decision, Decision::Allow);
    assert_eq!(e.decider, Decider::BreakGlass);
}

#[test]
fn on_kcp_break_glass_on_a_workspace_waits_until_nothing_protected_is_left() {
    let mut v = View {
        contents: vec![holding("lc-team", Some("root:org:team"), "vault", "Always")],
        ..View::default()
    };
    // kcp would delete the ConfigMap past holdfast: the marker on the Workspace
    // does not release it, and the refusal says what does.
    let req = delete_team(json!({"holdfast.dev/skip-protection": "true"}));
    let e = evaluate(&req, &kcp(), &v, now());
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::Protected);
    assert!(
        d.message.contains(
            "set the annotation holdfast.dev/skip-protection=true on each if you are allowed \
             to bypass protection): kcp deletes a workspace's contents past holdfast, so the \
             annotation on the Workspace itself is not honoured while it holds protected objects."
        ),
        "{}",
        d.message
    );
    // Once the ConfigMap carries the marker itself, the Workspace goes, as break-glass.
    v.contents[0].objects[0].object = vault_with_break_glass();
    let e = evaluate(&req, &kcp(), &v, now());
    assert_eq!(e.decision, Decision::Allow);
    assert_eq!(e.decider, Decider::BreakGlass);
}

#[test]
fn the_path_comes_from_the_url_kcp_sets() {
    let ws = |url: &str| json!({"spec": {"URL": url}});
    assert_eq!(
        crate::policy::workspace_path(&ws("https://s:6443/clusters/root:org:team")),
        Some("root:org:team".to_string())
    );
    for bad in [
        "https://s:6443/",
        "https://s/clusters/",
        "https://s/clusters/Root",
        "https://s/clusters/a::b",
    ] {
        assert_eq!(crate::policy::workspace_path(&ws(bad)), None, "{bad}");
    }
    assert_eq!(crate::policy::workspace_path(&json!({})), None);
}

const API_BINDING: (&str, &str, &str) = ("apis.kcp.io", "apibindings", "APIBinding");

#[test]
fn unbinding_an_export_with_protected_objects_of_its_types_is_refused() {
    let mut v = View {
        bound: vec![
            configmap(
                "lc-team",
                "vault",
                json!({"holdfast.dev/protected": "Always"}),
            ),
            configmap(
                "lc-other",
                "far",
                json!({"holdfast.dev/protected": "Always"}),
            ),
        ],
        ..View::default()
    };
    let req = in_cluster(
        delete_review(API_BINDING, None, None, "net", json!({})),
        "lc-team",
    );
    let e = evaluate(&req, &kcp(), &v, now());
    assert_decided(&e, Decider::Containment, "containment");
    let d = denied(&e);
    assert_eq!(
        d.blockers,
        vec!["ConfigMap default/vault (label)".to_string()]
    );
    assert_eq!(
        d.message,
        "holdfast: APIBinding net binds the types of objects that are protected from \
         deletion: ConfigMap default/vault (label) (policy: containment), so it cannot be \
         deleted: unbinding deletes every object of those types. To delete it, first lift the \
         protection of those objects (or delete them), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection on the \
         APIBinding."
    );
    // Outside kcp an "APIBinding" is an ordinary object; unreadable contents refuse.
    assert_eq!(
        evaluate(&req, &cfg(false, &[]), &v, now()).decision,
        Decision::Allow
    );
    v.fails = Some("retry later".into());
    assert_eq!(
        denied(&evaluate(&req, &kcp(), &v, now())).kind,
        DenialKind::LookupFailed
    );
    // Nothing protected among them: unbound as usual.
    v.fails = None;
    v.bound.remove(0);
    assert_eq!(evaluate(&req, &kcp(), &v, now()).decision, Decision::Allow);
}
