//! `kubectl holdfast check`: the installation's posture and its findings.

use super::*;
use crate::explain::{BACKSTOP_POLICY_NAME, CheckReport, not_ready, routes_delete};
use holdfast_shared::{
    api::{
        anchor_rule::AnchorRule, common::Enforcement, critical_service::CriticalService,
        dependency_rule::DependencyRule, resource_protection::ResourceProtection,
    },
    policy::Decider,
    webhookconfig::{
        anchor_rule_needs, critical_service_needs, dependency_rule_needs, resource_protection_needs,
    },
};
use kube::{api::ListParams, core::ApiResource};

pub(super) async fn list_json(client: &Client, ar: &ApiResource) -> Result<Vec<Value>, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    api.list(&ListParams::default())
        .await
        .map_err(|e| format!("listing {}: {e}", ar.plural))
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect()
        })
}

/// The resource discovery found, as the API client names it.
pub(super) fn api_resource(res: &ApiResourceInfo) -> ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk(&res.group, &res.version, &res.kind);
    ApiResource::from_gvk_with_plural(&gvk, &res.resource)
}

fn holdfast_ar(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: API_GROUP.to_string(),
        version: holdfast_shared::names::API_VERSION.to_string(),
        api_version: holdfast_shared::names::API_GROUP_VERSION.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// The resources a policy object names (whose DELETEs must reach the webhook).
fn policy_needs(kind: &str, v: &Value) -> Vec<holdfast_shared::api::common::GroupResource> {
    use holdfast_shared::api::common::GroupResource;
    fn needs<T: serde::de::DeserializeOwned>(
        v: &Value,
        of: fn(&T) -> Vec<GroupResource>,
    ) -> Vec<GroupResource> {
        serde_json::from_value(v.clone())
            .map(|p| of(&p))
            .unwrap_or_default()
    }
    match kind {
        "ResourceProtection" => needs::<ResourceProtection>(v, resource_protection_needs),
        "DependencyRule" => needs::<DependencyRule>(v, dependency_rule_needs),
        "CriticalService" => needs::<CriticalService>(v, critical_service_needs),
        "AnchorRule" => needs::<AnchorRule>(v, anchor_rule_needs),
        _ => Vec::new(),
    }
}

/// Whether the webhook behind `hook` (one entry of the configuration) is ready: the
/// Service's EndpointSlices have a ready endpoint, or the URL's host accepts a
/// connection.
async fn webhook_reachable(client: &Client, hook: &Value) -> Result<(), String> {
    let cc = &hook["clientConfig"];
    if let Some(url) = cc["url"].as_str() {
        let parsed: url::Url = url.parse().map_err(|e| format!("url {url:?}: {e}"))?;
        let host = parsed.host_str().unwrap_or_default().to_string();
        let port = parsed.port_or_known_default().unwrap_or(443);
        return match tokio::time::timeout(
            REACH_TIMEOUT,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("{url} does not answer: {e}")),
            Err(_) => Err(format!("{url} does not answer within 3s")),
        };
    }
    let (Some(ns), Some(name)) = (
        cc["service"]["namespace"].as_str(),
        cc["service"]["name"].as_str(),
    ) else {
        return Err("its clientConfig names neither a url nor a service".to_string());
    };
    let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), ns);
    let slices = api
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(|e| format!("cannot read the endpoints of Service {ns}/{name}: {e}"))?;
    let ready = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
    if ready {
        Ok(())
    } else {
        Err(format!("Service {ns}/{name} has no ready endpoint"))
    }
}

pub(super) async fn check(config: kube::Config, timeout: Duration) -> anyhow::Result<CheckReport> {
    let deadline = Instant::now() + timeout;
    let client = client(&config)?;
    let mut report = CheckReport::default();
    let mut notes = Vec::new();
    // On kcp (a workspace URL): kcp's own reasons first; a workspace that binds no
    // holdfast.dev has nothing else to check.
    let kcp = super::kcp::Workspace::of(&config.cluster_url);
    if let Some(ws) = &kcp
        && !super::kcp::check_findings(&client, ws, &mut report).await
    {
        return Ok(report);
    }
    let (labels, strict, configuration) = settings(&client, &mut notes).await;
    match &configuration {
        None => report.add(
            "error",
            "WebhookConfigurationMissing",
            &format!("ValidatingWebhookConfiguration/{WEBHOOK_CONFIGURATION_NAME}"),
            notes.join("; "),
        ),
        Some(c) => {
            report.webhook_configuration = true;
            for hook in c["webhooks"].as_array().into_iter().flatten() {
                let name = hook["name"].as_str().unwrap_or("?");
                let fp = hook["failurePolicy"].as_str().unwrap_or("Fail");
                report.failure_policies.push(format!("{name}: {fp}"));
                if fp == "Ignore" {
                    report.add(
                        "warning",
                        "FailurePolicyIgnore",
                        name,
                        "deletions it routes go through while the webhook is unreachable"
                            .to_string(),
                    );
                }
            }
            if let Some(first) = c["webhooks"].as_array().and_then(|w| w.first())
                && let Err(why) = webhook_reachable(&client, first).await
            {
                report.add("error", "WebhookNotReady", WEBHOOK_CONFIGURATION_NAME, why);
            }
        }
    }
    for (kind, plural) in [
        ("ResourceProtection", "resourceprotections"),
        ("DependencyRule", "dependencyrules"),
        ("CriticalService", "criticalservices"),
        ("AnchorRule", "anchorrules"),
    ] {
        let items = match list_json(&client, &holdfast_ar(kind, plural)).await {
            Ok(i) => i,
            Err(e) => {
                report.add("error", "ReadFailed", plural, e);
                continue;
            }
        };
        for item in items {
            let name = item["metadata"]["name"].as_str().unwrap_or("?");
            let subject = match item["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{kind}/{ns}/{name}"),
                None => format!("{kind}/{name}"),
            };
            let problem = not_ready(&item);
            if let Some((reason, message)) = &problem {
                let kind = if reason == "NotAdmissionControlled" {
                    "NotAdmissionControlled"
                } else if reason == "ConfigurationRefused" {
                    "ConfigurationRefused"
                } else {
                    "PolicyNotReady"
                };
                report.add("error", kind, &subject, format!("{reason}: {message}"));
            }
            if problem.is_none()
                && let Some(c) = &configuration
            {
                let needs = policy_needs(kind, &item);
                if needs.iter().any(holdfast_shared::unreviewed::is_wildcard) {
                    report.add(
                        "warning",
                        "NotAdmissionControlled",
                        &subject,
                        holdfast_shared::unreviewed::WILDCARD_LIMITS.to_string(),
                    );
                }
                for gr in needs {
                    if holdfast_shared::unreviewed::is_wildcard(&gr) {
                        continue;
                    }
                    if !routes_delete(c, &gr.group, &gr.resource) {
                        report.add(
                            "error",
                            "PolicyNotRouted",
                            &subject,
                            format!(
                                "the configuration {WEBHOOK_CONFIGURATION_NAME} routes no \
                                 DELETE of {gr} to the webhook"
                            ),
                        );
                    }
                }
            }
        }
    }
    let vap = ApiResource {
        group: "admissionregistration.k8s.io".to_string(),
        version: "v1".to_string(),
        api_version: "admissionregistration.k8s.io/v1".to_string(),
        kind: "ValidatingAdmissionPolicy".to_string(),
        plural: "validatingadmissionpolicies".to_string(),
    };
    match Api::<DynamicObject>::all_with(client.clone(), &vap)
        .get_opt(BACKSTOP_POLICY_NAME)
        .await
    {
        Ok(found) => report.backstop = found.is_some(),
        Err(e) => report.add("warning", "ReadFailed", BACKSTOP_POLICY_NAME, e.to_string()),
    }
    // The backstop is a Kubernetes ValidatingAdmissionPolicy; on kcp each workspace's
    // configuration is all there is.
    if !report.backstop && kcp.is_none() {
        report.add(
            "warning",
            "BackstopMissing",
            &format!("ValidatingAdmissionPolicy/{BACKSTOP_POLICY_NAME}"),
            "label protection depends on the webhook being reachable".to_string(),
        );
    }
    // What nothing protects: containers whose own DELETE nothing refuses, holding
    // protected objects (the webhook's containment, judged as an admin would be).
    let (cfg, view, stop_tx) = open_judge(config, &labels, strict, deadline).await?;
    let containers = [
        (ApiResourceInfo::namespaces(), "NamespaceUnprotected"),
        (
            ApiResourceInfo {
                group: "apiextensions.k8s.io".to_string(),
                version: "v1".to_string(),
                resource: "customresourcedefinitions".to_string(),
                singular: "customresourcedefinition".to_string(),
                kind: "CustomResourceDefinition".to_string(),
                namespaced: false,
                short_names: Vec::new(),
            },
            "CrdUnprotected",
        ),
    ];
    for (res, finding) in containers {
        let ar = api_resource(&res);
        let items = match list_json(&client, &ar).await {
            Ok(i) => i,
            Err(e) => {
                report.add("error", "ReadFailed", &res.resource, e);
                continue;
            }
        };
        for item in items {
            let name = item["metadata"]["name"].as_str().unwrap_or("?").to_string();
            let req = delete_review(&res, item, UserInfo::default());
            let e = explain_until(&req, &cfg, &view, deadline).await;
            let own = e.findings.iter().any(|f| {
                f.decider != Decider::Containment && f.enforcement == Enforcement::Enforce
            });
            let Some(contained) = e
                .findings
                .iter()
                .find(|f| f.decider == Decider::Containment)
            else {
                continue;
            };
            if own || contained.blockers.is_empty() {
                continue;
            }
            let what = if finding == "CrdUnprotected" {
                "deleting it deletes every instance, protected ones included, unless the \
                 webhook refuses it"
            } else {
                "only the webhook's containment check stands between a namespace deletion \
                 and them"
            };
            report.add(
                "error",
                finding,
                &format!("{}/{name}", res.kind),
                format!(
                    "not protected itself, yet holds protected objects: {}; {what}",
                    contained.blockers.join(", ")
                ),
            );
        }
    }
    drop(stop_tx);
    Ok(report)
}
