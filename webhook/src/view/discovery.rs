//! Discovery of the namespaced resources the label stores cover.

use holdfast_shared::api::common::GroupResource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::{Api, Client, api::DynamicObject};
use std::{collections::HashMap, time::Duration};

const APIREGISTRATION: &str = "apiregistration.k8s.io";

/// How long the discovery of one group version may take.
const GROUP_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The version of `group` to read: its preferred one, else the first it lists.
pub fn preferred_version(group: &APIGroup) -> Option<String> {
    group
        .preferred_version
        .as_ref()
        .map(|v| v.version.clone())
        .or_else(|| group.versions.first().map(|v| v.version.clone()))
}

/// Every namespaced resource that can be listed and watched (for label stores),
/// by API group version, from discovery group by group. A group whose discovery
/// fails keeps what `previous` had for it (a broken aggregated API never shrinks
/// what is watched); the failures are returned.
pub async fn namespaced_resources(
    client: &Client,
    previous: &HashMap<String, Vec<GroupResource>>,
) -> (HashMap<String, Vec<GroupResource>>, Vec<String>) {
    let mut out: HashMap<String, Vec<GroupResource>> = HashMap::new();
    let mut problems = Vec::new();
    let mut group_versions: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    // Whether the API server aggregates APIs of extension servers (kcp does not).
    let aggregation = match client.list_api_groups().await {
        Ok(groups) => {
            let aggregation = groups.groups.iter().any(|g| g.name == APIREGISTRATION);
            for g in groups.groups {
                if let Some(v) = preferred_version(&g) {
                    group_versions.push((g.name, v));
                }
            }
            aggregation
        }
        Err(e) => {
            problems.push(format!(
                "listing API groups failed: {}",
                holdfast_shared::watch::brief(&e)
            ));
            return (previous.clone(), problems);
        }
    };
    // Every group at once, each bounded in time: the client retries 503s with
    // backoff, and one unreachable aggregated API must not hold up the others.
    let lookups = group_versions
        .into_iter()
        .map(|(group, version)| async move {
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            let listed = tokio::time::timeout(GROUP_DISCOVERY_TIMEOUT, async {
                if group.is_empty() {
                    client.list_core_api_resources(&version).await
                } else {
                    client.list_api_group_resources(&gv).await
                }
            })
            .await;
            (group, version, gv, listed)
        });
    for (group, version, gv, listed) in futures::future::join_all(lookups).await {
        let resources = match listed {
            Ok(Ok(list)) => list
                .resources
                .into_iter()
                .filter(|r| {
                    r.namespaced
                        && !r.name.contains('/')
                        && r.verbs.iter().any(|v| v == "list")
                        && r.verbs.iter().any(|v| v == "watch")
                        && r.name != "events"
                })
                .map(|r| GroupResource::new(&group, &r.name))
                .collect(),
            // Listed a moment ago, not served now: the group went with its CRD
            // (and every object of it), unless an aggregated API answers 404.
            Ok(Err(e)) if holdfast_shared::watch::api_status(&e) == Some(404) => {
                match gone_with_its_crd(client, aggregation, &group, &version).await {
                    Ok(()) => {
                        tracing::debug!(group_version = %gv, "group version no longer served");
                        continue;
                    }
                    Err(why) => {
                        problems.push(format!("discovery of {gv} failed: {why}"));
                        previous.get(&group).cloned().unwrap_or_default()
                    }
                }
            }
            Ok(Err(e)) => {
                problems.push(format!(
                    "discovery of {gv} failed: {}",
                    holdfast_shared::watch::brief(&e)
                ));
                previous.get(&group).cloned().unwrap_or_default()
            }
            Err(_) => {
                problems.push(format!("discovery of {gv} failed: no answer within 5s"));
                previous.get(&group).cloned().unwrap_or_default()
            }
        };
        out.insert(group, resources);
    }
    (out, problems)
}

/// Whether a group version that was listed and then answered 404 is gone (`Ok`)
/// or broken (`Err`, why). Without API aggregation (kcp) nothing but a CRD can
/// serve it. With it, the group version's APIService decides: none left, or a
/// local one (a CRD's, being removed), is gone; an aggregated API's
/// (`spec.service`) answering 404 is not believed, so that an extension server
/// cannot hide its labelled objects from namespace containment by answering 404.
async fn gone_with_its_crd(
    client: &Client,
    aggregation: bool,
    group: &str,
    version: &str,
) -> Result<(), String> {
    if !aggregation {
        return Ok(());
    }
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &super::crds::api_service_resource());
    match api.get_opt(&format!("{version}.{group}")).await {
        Ok(None) => Ok(()),
        Ok(Some(svc)) => match svc.data["spec"]["service"].as_object() {
            None => Ok(()),
            Some(service) => Err(format!(
                "the aggregated API of service {}/{} answers 404",
                service
                    .get("namespace")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default(),
                service
                    .get("name")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
            )),
        },
        Err(e) => Err(format!(
            "it answers 404 and its APIService cannot be read: {}",
            holdfast_shared::watch::brief(&e)
        )),
    }
}
