//! kcp: the configuration `holdfast` of each workspace (its own types, the exports
//! providers' and consumers' policies route through, their label protection, the
//! enforcement probe).

use super::*;

/// Annotation on a kcp provider workspace's configuration listing the rules
/// (`<logical cluster>/<name>`) that contributed to it.
pub const RULES_ANNOTATION: &str = "holdfast.dev/rules";

/// The configuration `holdfast` for kcp provider workspace `cluster`: one webhook
/// per APIExport of `exports` (named by [`export_policies_webhook`]) with one rules
/// entry per protected resource (DELETE, versions `*`), calling
/// `<webhook URL>/kcp/<cluster>/<export>` so the webhook knows which export a
/// review came for (two exports of one workspace may export one group/resource);
/// recomputed from every rule targeting the workspace; `rules` (the contributing
/// rules) are recorded in [`RULES_ANNOTATION`].
pub fn provider_configuration(
    cluster: &str,
    exports: &BTreeMap<String, BTreeSet<GroupResource>>,
    rules: &BTreeSet<String>,
    opts: &InstallOptions,
) -> ValidatingWebhookConfiguration {
    let listed = rules.iter().cloned().collect::<Vec<_>>().join(",");
    let hooks = export_webhooks(cluster, exports, &BTreeMap::new(), opts);
    configuration((RULES_ANNOTATION, listed), hooks)
}

/// What the configuration `holdfast` of one kcp workspace routes (see
/// [`workspace_configuration`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkspaceTarget {
    /// The workspace binds holdfast's APIExport and accepts the claim on
    /// validating webhook configurations: its own types get label protection,
    /// containment and what its own policies need ([`WorkspaceTarget::local`]).
    pub binds: bool,
    /// What the workspace's own policies need on the workspace's own types (kcp
    /// calls the workspace's own configurations for them, kcp-facts 12).
    pub local: PolicyNeeds,
    /// Per APIExport of this workspace: the resources whose DELETEs some policy
    /// governs, the provider's DependencyRules and the policies of the consumers
    /// binding the export alike (kcp calls only this workspace's configurations
    /// for them).
    pub exports: BTreeMap<String, BTreeSet<GroupResource>>,
    /// Per APIExport of this workspace: the resources some strict policy (of a
    /// consumer) protects, whose break-glass and label-changing UPDATEs the export's
    /// webhook receives too (under strict mode, every resource of
    /// [`WorkspaceTarget::exports`]).
    pub strict_exports: BTreeMap<String, BTreeSet<GroupResource>>,
    /// The policies (`<logical cluster>/<name>`) routed through
    /// [`WorkspaceTarget::exports`], recorded in [`RULES_ANNOTATION`].
    pub rules: BTreeSet<String>,
    /// Per APIExport of this workspace: the resources workspaces that bind holdfast
    /// get from it. Their objects are label-protected (and, under strict mode, their
    /// labels guarded) through this workspace's configuration, since kcp calls only
    /// the export's workspace's configurations for them.
    pub label_exports: BTreeMap<String, BTreeSet<GroupResource>>,
    /// The workspace's APIBinding to holdfast's APIExport: the configuration's
    /// owner, so that kcp's garbage collector removes it when the workspace
    /// unbinds holdfast (holdfast can no longer reach it then).
    pub owner: Option<OwnerReference>,
}

impl WorkspaceTarget {
    /// Adds `other`, the target the policy kinds' plan gives the same workspace, to
    /// this one (the DependencyRules' exports): its exports and rules join these;
    /// what only the plan decides (binding, own needs, strict and label exports,
    /// owner) is taken from it.
    pub fn absorb(&mut self, other: WorkspaceTarget) {
        let WorkspaceTarget {
            binds,
            local,
            exports,
            strict_exports,
            rules,
            label_exports,
            owner,
        } = other;
        self.binds |= binds;
        self.local = local;
        for (export, grs) in exports {
            self.exports.entry(export).or_default().extend(grs);
        }
        self.strict_exports = strict_exports;
        self.rules.extend(rules);
        self.label_exports = label_exports;
        self.owner = owner;
    }
}

/// The configuration `holdfast` of kcp workspace `cluster`, or `None` when it
/// would route nothing (the workspace does not bind holdfast and no policy
/// routes through one of its exports).
///
/// When the workspace binds holdfast ([`WorkspaceTarget::binds`]): what
/// [`desired_configuration_for`] installs on Kubernetes for its own types, with
/// namespace containment for every namespace (kcp has no namespace markers) and
/// without the eviction webhook (kcp serves no pods) and the deferred-deletion
/// webhook (deferred deletion is off on kcp); these call
/// `<webhook URL>/kcp/<cluster>`. Then one `<export>.policies.holdfast.dev` webhook
/// per export of [`WorkspaceTarget::exports`], as [`provider_configuration`] builds
/// them, and last the enforcement probe ([`crate::enforcement`]). Annotated with
/// the settings, the contributing policies and the probe's Event name.
pub fn workspace_configuration(
    cluster: &str,
    labels: &ProtectionLabels,
    strict: bool,
    target: &WorkspaceTarget,
    opts: &InstallOptions,
) -> Option<ValidatingWebhookConfiguration> {
    if !target.binds && target.exports.is_empty() && target.label_exports.is_empty() {
        return None;
    }
    let mut hooks = Vec::new();
    if target.binds {
        let mut needs = target.local.clone();
        needs.containment = Containment::Everywhere;
        let local = desired_configuration_for(labels, strict, &needs, opts);
        let suffix = format!("/kcp/{cluster}");
        for mut h in local.webhooks.into_iter().flatten() {
            // (kcp has no containment markers: every namespace DELETE is routed.)
            if h.name == EVICTION_WEBHOOK
                || h.name == DEFERRED_WEBHOOK
                || h.name == CONTAINMENT_MARKER_WEBHOOK
            {
                continue;
            }
            with_path_suffix(&mut h, &suffix);
            // kcp: unbinding an export deletes every object of the types it binds
            // (kcp-facts 24): APIBinding DELETEs are judged like a namespace's.
            if h.name == CONTAINMENT_WEBHOOK {
                h.rules = Some(merged_rules(
                    "DELETE",
                    &[
                        GroupResource::new("", "namespaces"),
                        crds_gr(),
                        GroupResource::new("apis.kcp.io", "apibindings"),
                    ]
                    .into(),
                ));
            }
            // kcp calls this workspace's configurations for the consumers' objects
            // of its exported types too (kcp-facts 12): these webhooks are for the
            // workspace's own objects only.
            h.match_conditions
                .get_or_insert_with(Vec::new)
                .push(MatchCondition {
                    name: "object-of-this-workspace".to_string(),
                    expression: of_workspace_condition(cluster),
                });
            hooks.push(h);
        }
    }
    let mut strict_exports = target.strict_exports.clone();
    if strict {
        for (export, resources) in &target.exports {
            let set = strict_exports.entry(export.clone()).or_default();
            set.extend(resources.iter().cloned());
        }
    }
    hooks.extend(export_webhooks(
        cluster,
        &target.exports,
        &strict_exports,
        opts,
    ));
    for (export, resources) in target.label_exports.iter().filter(|(_, r)| !r.is_empty()) {
        hooks.extend(export_label_webhooks(
            cluster, export, resources, labels, strict, opts,
        ));
    }
    // Last: the enforcement probe, named after everything above it.
    let probe = crate::enforcement::probe_name(&hooks);
    hooks.push(crate::enforcement::probe_webhook(&probe, opts));
    let listed = target.rules.iter().cloned().collect::<Vec<_>>().join(",");
    let mut cfg = configuration((RULES_ANNOTATION, listed), hooks);
    cfg.metadata.owner_references = target.owner.clone().map(|o| vec![o]);
    if let Some(a) = cfg.metadata.annotations.as_mut() {
        a.insert(crate::enforcement::ANNOTATION.to_string(), probe);
        if target.binds {
            a.insert(
                SETTINGS_ANNOTATION.to_string(),
                settings_annotation(labels, strict),
            );
        }
    }
    Some(cfg)
}

/// The matchCondition passing only requests on objects of logical cluster `cluster`
/// (kcp's `kcp.io/cluster` annotation; an object without it passes: fail closed).
pub fn of_workspace_condition(cluster: &str) -> String {
    let k = cel_str(crate::names::KCP_CLUSTER_ANNOTATION);
    let lc = cel_str(cluster);
    let of = |o: &str| {
        format!(
            "({o} == null || !has({o}.metadata.annotations) || !({k} in {o}.metadata.annotations) \
             || {o}.metadata.annotations[{k}] == {lc})"
        )
    };
    format!("{} && {}", of("oldObject"), of("object"))
}

/// One `<export>.policies.holdfast.dev` webhook per export of `exports`, with one
/// DELETE rules entry per resource, calling `<webhook URL>/kcp/<cluster>/<export>`.
/// Where `strict` lists resources of the export, the webhook also receives their
/// UPDATEs (subresources included) that add a break-glass marker or change labels,
/// as [`BREAK_GLASS_WEBHOOK`] does for a workspace's own types (kcp calls only the
/// export workspace's configurations for them).
pub(super) fn export_webhooks(
    cluster: &str,
    exports: &BTreeMap<String, BTreeSet<GroupResource>>,
    strict: &BTreeMap<String, BTreeSet<GroupResource>>,
    opts: &InstallOptions,
) -> Vec<ValidatingWebhook> {
    exports
        .iter()
        .map(|(export, resources)| {
            let mut h = webhook(
                export_policies_webhook(export),
                opts,
                all_resources("DELETE"),
            );
            with_path_suffix(&mut h, &format!("/kcp/{cluster}/{export}"));
            h.rules = Some(
                resources
                    .iter()
                    .map(|gr| RuleWithOperations {
                        operations: Some(vec!["DELETE".to_string()]),
                        api_groups: Some(vec![gr.group.clone()]),
                        api_versions: Some(vec!["*".to_string()]),
                        resources: Some(vec![gr.resource.clone()]),
                        scope: Some("*".to_string()),
                    })
                    .collect(),
            );
            if let Some(updates) = strict.get(export).filter(|u| !u.is_empty())
                && let Some(rules) = h.rules.as_mut()
            {
                rules.extend(with_subresources(merged_rules("UPDATE", updates)));
                h.match_conditions = Some(vec![MatchCondition {
                    name: "delete-or-break-glass-marker-added-or-labels-changed".to_string(),
                    expression: format!(
                        "request.operation == 'DELETE' || {} || {}",
                        break_glass_condition(),
                        LABELS_CHANGED
                    ),
                }]);
            }
            h
        })
        .collect()
}

/// The label webhooks of [`label_webhooks`] for the objects of `resources` that
/// consumers get from APIExport `export` of workspace `cluster`: the same
/// objectSelectors and matchConditions, only those resources, named
/// `<export>.<name>` (see [`export_scoped_webhook`]) and calling
/// `<webhook URL>/kcp/<cluster>/<export>` (the webhook applies them to workspaces
/// that bind holdfast only).
pub(super) fn export_label_webhooks(
    cluster: &str,
    export: &str,
    resources: &BTreeSet<GroupResource>,
    labels: &ProtectionLabels,
    strict: bool,
    opts: &InstallOptions,
) -> Vec<ValidatingWebhook> {
    label_webhooks(labels, strict, opts)
        .into_iter()
        .map(|mut h| {
            h.rules = Some(if h.name.starts_with("strict-label-") {
                with_subresources(merged_rules("UPDATE", resources))
            } else {
                let mut rules = merged_rules("DELETE", resources);
                rules.extend(merged_rules("CREATE", resources));
                rules.extend(with_subresources(merged_rules("UPDATE", resources)));
                rules
            });
            h.name = export_scoped_webhook(export, &h.name);
            with_path_suffix(&mut h, &format!("/kcp/{cluster}/{export}"));
            h
        })
        .collect()
}

/// `<export>.<name>`, or, where that would pass the 253 characters a webhook name
/// may have, `x<hash of the export name>.<name>`.
pub fn export_scoped_webhook(export: &str, name: &str) -> String {
    let scoped = format!("{export}.{name}");
    if scoped.len() <= 253 {
        return scoped;
    }
    // FNV-1a: stable across builds and platforms.
    let hash = export.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("x{hash:016x}.{name}")
}

/// Name of the webhook receiving the DELETEs of APIExport `export`'s resources in a
/// kcp provider workspace: `<export>.policies.holdfast.dev` (export names are DNS
/// subdomains, unique in their workspace), or, where that would pass the 253
/// characters a webhook name may have, `x<hash of the name>.policies.holdfast.dev`.
pub fn export_policies_webhook(export: &str) -> String {
    export_scoped_webhook(export, POLICIES_WEBHOOK)
}
