//! kcp: a server URL that names a workspace (`…/clusters/<path>`, as `kubectl ws`
//! sets it, or `--server`) gets kcp's own reasons besides holdfast's: whether the
//! workspace binds holdfast.dev, the claims its binding did not accept, and, for a
//! Workspace, what it and the workspaces below it hold (kcp deletes a workspace's
//! contents past holdfast, so holdfast refuses its DELETE while they hold protected
//! objects; docs/kcp.md, "Workspace containment").

use super::*;
use crate::explain::{BreakGlassReport, CheckReport};
use holdfast_shared::{
    api::common::Enforcement,
    policy::{Decider, Finding},
};

/// How deep `why` follows workspaces below the one asked about.
const MAX_DEPTH: usize = 8;

/// A kcp workspace: the server's URL before `/clusters/`, and the workspace's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Workspace {
    pub base: String,
    pub path: String,
}

impl Workspace {
    /// The workspace `url` names, if it names one.
    pub(super) fn of(url: &http::Uri) -> Option<Self> {
        let s = url.to_string();
        let (base, rest) = s.split_once("/clusters/")?;
        let path = rest.split('/').next().unwrap_or_default();
        (!path.is_empty()).then(|| Self {
            base: base.to_string(),
            path: path.to_string(),
        })
    }

    fn child(&self, name: &str) -> Self {
        Self {
            base: self.base.clone(),
            path: format!("{}:{name}", self.path),
        }
    }

    fn config(&self, config: &kube::Config) -> anyhow::Result<kube::Config> {
        let mut c = config.clone();
        let url = format!("{}/clusters/{}", self.base, self.path);
        c.cluster_url = url
            .parse()
            .map_err(|e| anyhow!("workspace URL {url:?}: {e}"))?;
        Ok(c)
    }
}

/// The workspace's APIBinding to holdfast's APIExport, if it has one.
async fn holdfast_binding(client: &Client) -> Result<Option<Value>, String> {
    let items = check::list_json(client, &holdfast_shared::kcp::api_binding_resource()).await?;
    Ok(items
        .into_iter()
        .find(|b| b["spec"]["reference"]["export"]["name"] == API_GROUP))
}

/// The claims holdfast's export asks for that the binding did not accept:
/// (group, resource).
fn unaccepted(binding: &Value) -> Vec<(String, String)> {
    let pair = |c: &Value| {
        (
            c["group"].as_str().unwrap_or_default().to_string(),
            c["resource"].as_str().unwrap_or_default().to_string(),
        )
    };
    let accepted: Vec<(String, String)> = binding["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["state"] == "Accepted")
        .map(pair)
        .collect();
    binding["status"]["exportPermissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(pair)
        .filter(|p| !accepted.contains(p))
        .collect()
}

/// What a claim not accepted costs this workspace: (severity, message).
fn claim_cost(group: &str, resource: &str) -> (&'static str, String) {
    let what = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let cost = match (group, resource) {
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            return (
                "error",
                format!(
                    "the claim on {what} is not accepted: holdfast cannot install its \
                     configuration {WEBHOOK_CONFIGURATION_NAME} here, so no DELETE in this \
                     workspace reaches it"
                ),
            );
        }
        ("", "events") => {
            return (
                "error",
                format!(
                    "the claim on {what} is not accepted: holdfast's Events never reach this \
                     workspace, and its policies stay NotEnforcedYet (kcp's enforcement is \
                     checked with an Event)"
                ),
            );
        }
        ("apis.kcp.io", "apibindings") => {
            "holdfast cannot see this workspace's bindings (where it lies in the tree, what \
             an unbinding would delete)"
        }
        _ => "holdfast cannot use it here",
    };
    (
        "warning",
        format!("the claim on {what} is not accepted: {cost}"),
    )
}

/// kcp's findings for `check`; whether the workspace binds holdfast.dev.
pub(super) async fn check_findings(
    client: &Client,
    ws: &Workspace,
    report: &mut CheckReport,
) -> bool {
    let binding = match holdfast_binding(client).await {
        Ok(b) => b,
        Err(e) => {
            report.add("warning", "ReadFailed", "apibindings.apis.kcp.io", e);
            return true;
        }
    };
    let Some(b) = binding else {
        report.add(
            "error",
            "NotBound",
            &format!("APIExport {API_GROUP}"),
            format!(
                "workspace {} binds no APIExport {API_GROUP}: holdfast protects nothing in it \
                 (bind it and accept its claims: docs/kcp.md)",
                ws.path
            ),
        );
        return false;
    };
    let name = b["metadata"]["name"].as_str().unwrap_or("?");
    let subject = format!("APIBinding/{name}");
    if b["status"]["phase"] != "Bound" {
        let why: Vec<String> = b["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "True")
            .map(|c| {
                format!(
                    "{}: {}",
                    c["type"].as_str().unwrap_or("?"),
                    c["message"].as_str().unwrap_or_default()
                )
            })
            .collect();
        report.add(
            "error",
            "BindingNotBound",
            &subject,
            format!(
                "phase {}{}",
                b["status"]["phase"].as_str().unwrap_or("unknown"),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join("; "))
                }
            ),
        );
    }
    for (group, resource) in unaccepted(&b) {
        let (severity, message) = claim_cost(&group, &resource);
        report.add(severity, "ClaimNotAccepted", &subject, message);
    }
    true
}

/// kcp's notes for `why` of an object in workspace `client` reads: None when the
/// workspace binds no holdfast.dev (nothing there would refuse), else the notes.
pub(super) async fn why_notes(client: &Client, ws: &Workspace) -> Option<Vec<String>> {
    match holdfast_binding(client).await {
        Ok(None) => None,
        Ok(Some(b)) => Some(
            unaccepted(&b)
                .into_iter()
                .map(|(g, r)| claim_cost(&g, &r).1)
                .collect(),
        ),
        Err(e) => Some(vec![format!(
            "cannot read the APIBindings of workspace {} ({e})",
            ws.path
        )]),
    }
}

/// The report on a DELETE nothing of holdfast's judges (its workspace binds no
/// holdfast.dev): allowed, with `notes` saying why.
pub(super) fn unjudged(
    object: ObjectRef,
    user: (String, Vec<String>),
    notes: Vec<String>,
) -> WhyReport {
    WhyReport {
        object,
        user: user.0,
        groups: user.1,
        allowed: true,
        decision: "allow".to_string(),
        decided_by: "none".to_string(),
        messages: Vec::new(),
        protections: Vec::new(),
        break_glass: BreakGlassReport {
            active: None,
            ignored: None,
            caller_may_bypass: None,
            bypass_check_error: None,
        },
        ways_out: Vec::new(),
        notes,
    }
}

/// The protected objects in workspace `ws` and below it, as holdfast's workspace
/// containment counts them (`<object> in <path>`), and what could not be read.
async fn protected_below(
    config: &kube::Config,
    ws: &Workspace,
    deadline: Instant,
) -> (Vec<String>, Vec<String>) {
    let mut held = Vec::new();
    let mut problems = Vec::new();
    let mut todo = vec![(ws.clone(), 0usize)];
    while let Some((ws, depth)) = todo.pop() {
        let cfg = match ws.config(config) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        let client = match client(&cfg) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        match holdfast_binding(&client).await {
            Ok(Some(_)) => match held_in(cfg, &client, deadline).await {
                Ok(h) => held.extend(h.into_iter().map(|o| format!("{o} in {}", ws.path))),
                Err(e) => problems.push(format!("workspace {}: {e:#}", ws.path)),
            },
            Ok(None) => {}
            Err(e) => problems.push(format!("workspace {}: {e}", ws.path)),
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        match check::list_json(&client, &holdfast_shared::kcp::workspace_resource()).await {
            Ok(items) => todo.extend(items.iter().filter_map(|w| {
                w["metadata"]["name"]
                    .as_str()
                    .map(|n| (ws.child(n), depth + 1))
            })),
            Err(e) => problems.push(format!("workspace {}: {e}", ws.path)),
        }
    }
    held.sort();
    (held, problems)
}

/// The protected objects of one workspace that binds holdfast.dev: what its
/// namespaces hold, judged as the webhook's containment judges a namespace.
async fn held_in(
    cfg: kube::Config,
    client: &Client,
    deadline: Instant,
) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    let (labels, strict, _) = settings(client, &mut notes).await;
    let (policy, view, stop_tx) = open_judge(cfg, &labels, strict, deadline).await?;
    let namespaces = ApiResourceInfo::namespaces();
    let items = check::list_json(client, &api_resource(&namespaces))
        .await
        .map_err(|e| anyhow!(e));
    let mut held = Vec::new();
    for item in items.into_iter().flatten() {
        let req = delete_review(&namespaces, item, UserInfo::default());
        let e = explain_until(&req, &policy, &view, deadline).await;
        for f in e
            .findings
            .iter()
            .filter(|f| f.decider == Decider::Containment)
        {
            held.extend(f.blockers.iter().cloned());
        }
    }
    drop(stop_tx);
    Ok(held)
}

/// `why` of Workspace `name` in `ws`: refused while it or a workspace below it
/// holds protected objects (break-glass on the Workspace does not count then).
pub(super) async fn why_workspace(
    config: &kube::Config,
    ws: &Workspace,
    object: &Value,
    user: (String, Vec<String>),
    deadline: Instant,
) -> WhyReport {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let child = ws.child(name);
    let (held, problems) = protected_below(config, &child, deadline).await;
    let allowed = held.is_empty() && problems.is_empty();
    let message = if held.is_empty() {
        String::new()
    } else {
        format!(
            "holdfast: Workspace {} holds objects that are protected from deletion: {}, so it \
             cannot be deleted: that would delete them all, unchecked",
            child.path,
            held.join(", ")
        )
    };
    let marker = holdfast_shared::names::SKIP_ANNOTATION;
    let marked = object["metadata"]["annotations"][marker] == "true";
    let mut notes = vec![format!(
        "judged as kcp admits it: a Workspace DELETE goes through root's configuration \
         holdfast-workspaces, and kcp deletes a workspace's contents past holdfast, so \
         holdfast refuses it while {} or a workspace below it that binds {API_GROUP} holds \
         a protected object",
        child.path
    )];
    notes.extend(
        problems
            .iter()
            .map(|p| format!("could not read {p}: refused until it can")),
    );
    WhyReport {
        object: ObjectRef {
            api_version: "tenancy.kcp.io/v1alpha1".to_string(),
            kind: "Workspace".to_string(),
            resource: "workspaces.tenancy.kcp.io".to_string(),
            namespace: None,
            name: name.to_string(),
        },
        user: user.0,
        groups: user.1,
        allowed,
        decision: if allowed { "allow" } else { "deny" }.to_string(),
        decided_by: if allowed { "none" } else { "containment" }.to_string(),
        messages: if message.is_empty() {
            Vec::new()
        } else {
            vec![message.clone()]
        },
        protections: if held.is_empty() && problems.is_empty() {
            Vec::new()
        } else {
            vec![Finding {
                decider: Decider::Containment,
                enforcement: Enforcement::Enforce,
                lookup_failed: !problems.is_empty(),
                message,
                blockers: held.clone(),
            }]
        },
        break_glass: BreakGlassReport {
            active: None,
            ignored: (marked && !held.is_empty()).then(|| {
                format!(
                    "annotation {marker} on the Workspace: not honoured while it holds \
                     protected objects"
                )
            }),
            caller_may_bypass: None,
            bypass_check_error: None,
        },
        ways_out: if held.is_empty() {
            Vec::new()
        } else {
            vec![
                "lift the protection of those objects, or delete them".to_string(),
                format!(
                    "set the annotation {marker}=true on each of them if you are allowed to \
                     bypass protection"
                ),
            ]
        },
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_workspace_url_names_its_workspace() {
        let url: http::Uri = "https://kcp.example:6443/clusters/root:org/"
            .parse()
            .expect("url");
        let ws = Workspace::of(&url).expect("a workspace");
        assert_eq!(ws.base, "https://kcp.example:6443");
        assert_eq!(ws.path, "root:org");
        assert_eq!(ws.child("team").path, "root:org:team");
        let plain: http::Uri = "https://kube.example:6443".parse().expect("url");
        assert_eq!(Workspace::of(&plain), None);
    }

    #[test]
    fn claims_not_accepted_are_named_with_what_they_cost() {
        let b = json!({
            "spec": {"permissionClaims": [
                {"group": "", "resource": "events", "state": "Rejected"},
                {"group": "apis.kcp.io", "resource": "apibindings", "state": "Accepted"}]},
            "status": {"exportPermissionClaims": [
                {"group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations"},
                {"group": "", "resource": "events"},
                {"group": "apis.kcp.io", "resource": "apibindings"}]}
        });
        let missing = unaccepted(&b);
        assert_eq!(
            missing,
            [
                (
                    "admissionregistration.k8s.io".to_string(),
                    "validatingwebhookconfigurations".to_string()
                ),
                (String::new(), "events".to_string())
            ]
        );
        let (severity, message) = claim_cost("", "events");
        assert_eq!(severity, "error");
        assert!(message.contains("NotEnforcedYet"), "{message}");
        assert_eq!(claim_cost("x.io", "things").0, "warning");
    }
}
