//! ResourceProtection: objects a selector names are protected (in mode `Cascading`,
//! while they have live contents).

use super::cascading::{Live, live_contents};
use super::{
    ClusterView, PolicyKind, PolicyRef,
    messages::{self, Alive},
    objects::Subject,
    outcome::Outcome,
};

/// What every ResourceProtection selecting the object says about its DELETE.
pub(crate) async fn evaluate<V: ClusterView>(s: &Subject<'_>, view: &V, out: &mut Outcome) {
    let Subject {
        gr,
        name,
        namespace,
        what,
        ..
    } = s;
    // Live contents are asked at most once, by the first Cascading policy.
    let mut live: Option<Live> = None;
    for rp in view.protection_candidates(s.cluster, gr, *namespace) {
        let Some(sel) = rp.selecting(gr, *namespace, name, s.labels()).next() else {
            continue;
        };
        let policy = PolicyRef::new(PolicyKind::ResourceProtection, &rp.key);
        let shown = policy.to_string();
        let scope = messages::selection_scope(
            gr,
            sel.is_wildcard().then_some(sel.group.as_str()),
            sel.namespace.as_deref(),
            sel.names.as_deref(),
            sel.label_selector.is_some(),
        );
        let mut note = "";
        if rp.cascading {
            if !view.cascading_judged() {
                note = messages::PROTECTION_CASCADING_UNJUDGED;
            } else {
                if live.is_none() {
                    live = Some(live_contents(s.req, s.obj, view).await);
                }
                match live.as_ref() {
                    Some(Live::Drained) => continue,
                    Some(Live::Alive {
                        condition,
                        still,
                        blockers,
                        drain,
                    }) => {
                        let alive = Alive {
                            condition,
                            still,
                            drain,
                        };
                        let message =
                            messages::protection_alive(what, &shown, &scope, alive, &rp.key.name);
                        out.record(rp.enforcement, policy, message, blockers.clone());
                        continue;
                    }
                    Some(Live::Unknown(why)) => {
                        let message = messages::protection_live_unknown(what, &shown, &scope, why);
                        out.lookup_failed(rp.enforcement, policy, message);
                        continue;
                    }
                    Some(Live::NoContents) | None => {
                        note = messages::PROTECTION_CASCADING_NO_CONTENTS;
                    }
                }
            }
        }
        let message = messages::protection_protected(what, &shown, &scope, note, &rp.key.name);
        out.record(
            rp.enforcement,
            policy,
            message,
            vec![format!("ResourceProtection/{}", rp.key.name)],
        );
    }
}
