//! Discovery of the namespaced resources the label stores cover.

use holdfast_shared::api::common::GroupResource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::Client;
use std::{collections::HashMap, time::Duration};

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
    match client.list_api_groups().await {
        Ok(groups) => {
            for g in groups.groups {
                if let Some(v) = preferred_version(&g) {
                    group_versions.push((g.name, v));
                }
            }
        }
        Err(e) => {
            problems.push(format!(
                "listing API groups failed: {}",
                holdfast_shared::watch::brief(&e)
            ));
            return (previous.clone(), problems);
        }
    }
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
            (group, gv, listed)
        });
    for (group, gv, listed) in futures::future::join_all(lookups).await {
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
            // Listed a moment ago, not served now: the group went (its CRD or
            // APIService was deleted in between), and with it every object of it.
            Ok(Err(e)) if holdfast_shared::watch::api_status(&e) == Some(404) => {
                tracing::debug!(group_version = %gv, "group version no longer served");
                continue;
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
