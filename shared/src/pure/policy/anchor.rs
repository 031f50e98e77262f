//! AnchorRule: an object stays while the anchor its labels (or its namespace's)
//! name exists, with its toggle on.

use super::{
    ClusterView, PolicyKind, PolicyRef, critical::describe_ref, messages, objects::Subject,
    outcome::Outcome,
};
use crate::{
    names::{ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT},
    policy::cascading::is_terminating,
    registry::{CompiledAnchor, namespaces_gr},
    review::labels,
};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The value of label `key`, if any.
fn label(l: Option<&Map<String, Value>>, key: &str) -> Option<String> {
    l.and_then(|l| l.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The anchor's (name, namespace) as the labels `l` name it for `ar`.
fn anchor_named(
    ar: &CompiledAnchor,
    l: Option<&Map<String, Value>>,
) -> (Option<String>, Option<String>) {
    (
        label(l, &ar.name_label),
        ar.namespace_label.as_deref().and_then(|k| label(l, k)),
    )
}

/// What every AnchorRule protecting the object's resource says about its DELETE.
pub(crate) async fn evaluate<V: ClusterView>(s: &Subject<'_>, view: &V, out: &mut Outcome) {
    let Some(rules) = view.anchors(&s.gr) else {
        return;
    };
    let own = s.labels();
    let overridden = [ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT]
        .iter()
        .any(|k| own.and_then(|l| l.get(*k)).and_then(Value::as_str) == Some("true"));
    if overridden {
        return;
    }
    let (cluster, what) = (s.cluster, &s.what);
    // The namespace's labels are read at most once, by the first rule that needs them.
    let mut ns_labels: Option<Option<Arc<Value>>> = None;
    for ar in rules.iter() {
        if !ar.key.cluster.is_empty() && &*ar.key.cluster != cluster {
            continue;
        }
        let policy = PolicyRef::new(PolicyKind::AnchorRule, &ar.key);
        let (mut anchor_name, mut anchor_ns) = anchor_named(ar, own);
        let inherit = ar
            .protects
            .iter()
            .any(|(g, inherit)| *g == s.gr && *inherit);
        if anchor_name.is_none()
            && inherit
            && let Some(ns) = s.namespace
        {
            if ns_labels.is_none() {
                match view.object(cluster, &namespaces_gr(), None, ns).await {
                    Ok(v) => ns_labels = Some(v),
                    Err(e) => {
                        let message = messages::anchor_namespace_unread(
                            ns,
                            what,
                            &policy.to_string(),
                            e.message(),
                        );
                        out.lookup_failed(ar.enforcement, policy, message);
                        continue;
                    }
                }
            }
            let nl = ns_labels
                .as_ref()
                .and_then(|o| o.as_ref())
                .and_then(|o| labels(o));
            (anchor_name, anchor_ns) = anchor_named(ar, nl);
        }
        let Some(anchor_name) = anchor_name else {
            continue;
        };
        let anchor_desc = describe_ref(&ar.anchor.to_string(), anchor_ns.as_deref(), &anchor_name);
        let found = match &ar.source {
            None => {
                view.object(cluster, &ar.anchor, anchor_ns.as_deref(), &anchor_name)
                    .await
            }
            Some(source) => {
                view.remote_object(source, &ar.anchor, anchor_ns.as_deref(), &anchor_name)
                    .await
            }
        };
        match found {
            Ok(None) => {}
            Ok(Some(anchor)) => {
                if is_terminating(&anchor) {
                    continue;
                }
                let on = ar
                    .toggle
                    .as_ref()
                    .and_then(|p| p.first(&anchor))
                    .and_then(Value::as_bool)
                    .unwrap_or(ar.toggle_default);
                if !on {
                    continue;
                }
                let message = messages::anchor_protected(
                    what,
                    &anchor_desc,
                    ar.source.as_ref().map(|s| s as &dyn std::fmt::Display),
                    ar.toggle.as_ref().map(|p| p as &dyn std::fmt::Display),
                    &policy.to_string(),
                );
                out.record(ar.enforcement, policy, message, vec![anchor_desc]);
            }
            Err(e) => {
                let message =
                    messages::anchor_unread(&anchor_desc, what, &policy.to_string(), e.message());
                out.lookup_failed(ar.enforcement, policy, message);
            }
        }
    }
}
