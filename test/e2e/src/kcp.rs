//! The seed 003 kcp topology shared by the kcp end-to-end tests and the demo, on a
//! kcp of two shards (`crate::kcp_sharded`): holdfast runs as the users
//! `holdfast-controller` and `holdfast-webhook` with only the RBAC it ships; a
//! compute provider (`root:compute`, shard `root`), a network provider nested two
//! levels deep (`root:providers:network`, shard `shard-1`), and a consumer binding
//! both (`root:consumer`, shard `shard-1`). Providers and the consumer act as users
//! of their own (`provider`, `consumer`); `platform` is the platform team.

use anyhow::Context as _;

pub use crate::kcp_sharded::{COMPUTE, HOLDFAST, NETWORK, Sharded as Kcp};

/// The consumer workspace of the topology (on shard `shard-1`).
pub const CONSUMER: &str = "root:consumer";

impl Kcp {
    /// `kubectl get ARGS -o json` as `user` in workspace `path`; panics unless
    /// kubectl exits 0.
    pub fn get_json(&self, user: &str, path: &str, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        self.kubectl(user, path, &all)
            .json()
            .unwrap_or_else(|e| panic!("in {path}: {e}"))
    }

    /// Waits (at most 30 s) until, in workspace `path`, the policy `kind`/`name`
    /// has condition `type_` with `status`; returns the condition.
    pub async fn wait_condition(
        &self,
        path: &str,
        [kind, name, type_, status]: [&str; 4],
    ) -> serde_json::Value {
        let at = self.ws(path);
        let query = [kind, name, type_, status];
        crate::controller::wait_condition_at(&self.env, Some(&at), query, self.wait.as_secs())
            .await
            .unwrap_or_else(|e| panic!("in {path}: {e:#}"))
    }

    /// The webhook's arguments: `--topology kcp`, the `holdfast-webhook` identity's
    /// kubeconfig, `--dependents mode`.
    pub fn webhook_args(&self, mode: &str) -> Vec<String> {
        let kubeconfig = self.webhook_kubeconfig.as_str();
        [
            "--topology",
            "kcp",
            "--kubeconfig",
            kubeconfig,
            "--dependents",
            mode,
        ]
        .map(str::to_string)
        .to_vec()
    }

    /// Starts the webhook (`--dependents mode`) and the controller (process `name`)
    /// as holdfast's identities and waits until the controller is ready.
    pub async fn start_holdfast(
        &mut self,
        name: &str,
        mode: &str,
    ) -> anyhow::Result<crate::controller::ControllerProcess> {
        self.start_holdfast_with(name, mode, &[]).await
    }

    /// [`Kcp::start_holdfast`], both binaries also given `flags` (flags both must
    /// agree on, e.g. `--strict`).
    pub async fn start_holdfast_with(
        &mut self,
        name: &str,
        mode: &str,
        flags: &[&str],
    ) -> anyhow::Result<crate::controller::ControllerProcess> {
        let mut args = self.webhook_args(mode);
        args.extend(flags.iter().map(|f| f.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.env.start_webhook(&args).await?;
        let Some(port) = self.env.webhook.as_ref().map(|w| w.port) else {
            anyhow::bail!("the webhook did not start");
        };
        let kubeconfig = self.controller_kubeconfig.as_str();
        let mut controller_args = vec!["--kubeconfig", kubeconfig, "--topology", "kcp"];
        controller_args.extend_from_slice(flags);
        let mut c = crate::controller::start_controller(&self.env, name, port, &controller_args)?;
        c.wait_ready(self.wait.as_secs())
            .await
            .with_context(|| format!("controller {name} not ready: {}", c.log()))?;
        Ok(c)
    }

    /// Whether `kubectl get ARGS` as `user` in workspace `path` finds the object:
    /// NotFound is `false`, any other failure panics (a failing kubectl never reads
    /// as absent).
    pub fn exists(&self, user: &str, path: &str, args: &[&str]) -> bool {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        let out = self.kubectl(user, path, &all);
        if out.code == 0 {
            true
        } else if out.is_not_found() {
            false
        } else {
            panic!("kubectl get {} in {path} failed: {out:?}", args.join(" "))
        }
    }
}

/// A Workspace manifest.
pub fn workspace(name: &str) -> String {
    format!("apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {{name: {name}}}\n")
}

/// An APIResourceSchema for a namespaced `plural.group` of `kind`.
pub fn schema(group: &str, plural: &str, kind: &str) -> String {
    format!(
        r#"apiVersion: apis.kcp.io/v1alpha1
kind: APIResourceSchema
metadata: {{name: v1.{plural}.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
        singular = plural.trim_end_matches('s')
    )
}

/// An APIExport of `schemas`.
pub fn export(name: &str, schemas: &[&str]) -> String {
    let list = schemas
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: apis.kcp.io/v1alpha1\nkind: APIExport\nmetadata: {{name: {name}}}\nspec: {{latestResourceSchemas: [{list}]}}\n"
    )
}

/// An APIBinding to `path`/`export` (a consumer's: no permission claims).
pub fn binding(name: &str, path: &str, export: &str) -> String {
    format!(
        "apiVersion: apis.kcp.io/v1alpha2\nkind: APIBinding\nmetadata: {{name: {name}}}\nspec:\n  reference: {{export: {{path: \"{path}\", name: {export}}}}}\n"
    )
}

/// A DependencyRule: `dependent` (group, kind, resource) referencing each of `deps`
/// (export path, export name, group, resource, field path).
pub fn dependency_rule(
    name: &str,
    dependent: (&str, &str, &str),
    deps: &[(&str, &str, &str, &str, &str)],
) -> String {
    let (dg, dk, dr) = dependent;
    let mut s = format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: DependencyRule\nmetadata: {{name: {name}}}\nspec:\n  dependent: {{apiExportName: {dg}, group: {dg}, version: v1, kind: {dk}, resource: {dr}}}\n  dependencies:\n"
    );
    for (path, export, group, resource, field) in deps {
        s.push_str(&format!(
            "  - apiExportRef: {{path: \"{path}\", name: {export}}}\n    group: {group}\n    version: v1\n    resource: {resource}\n    fieldRef: {{path: \"{field}\"}}\n"
        ));
    }
    s
}

/// The DependencyRule `name` of seed 003 on kcp: VirtualMachines (compute)
/// reference the network provider's VPCs at `.spec.vpcRef.name`.
pub fn vm_vpc_rule(name: &str) -> String {
    let vpcs = (
        NETWORK,
        "network.test.io",
        "network.test.io",
        "vpcs",
        ".spec.vpcRef.name",
    );
    dependency_rule(
        name,
        ("compute.test.io", "VirtualMachine", "virtualmachines"),
        &[vpcs],
    )
}

/// A DependencyRule `name` in the network provider: `dependent` (group, kind,
/// resource) references the compute provider's VirtualMachines at
/// `.spec.gatewayVm`.
pub fn gateway_vm_rule(name: &str, dependent: (&str, &str, &str)) -> String {
    let vms = (
        "root:compute",
        "compute.test.io",
        "compute.test.io",
        "virtualmachines",
        ".spec.gatewayVm",
    );
    dependency_rule(name, dependent, &[vms])
}

/// Sets up the topology on a fresh sim: [`crate::kcp_sharded::sharded`] (two
/// shards, holdfast's identities with the shipped RBAC, providers on both shards)
/// and the consumer [`CONSUMER`] on `shard-1`. Plain `kubectl` of the environment
/// (`env.kubectl`, the `*_at` helpers) acts as the platform team.
pub async fn topology() -> anyhow::Result<Kcp> {
    // kcp: a sim of its own, or a real kcp of its own with HOLDFAST_E2E_KCP=real
    // (HOLDFAST_E2E_KUBECONFIG is a Kubernetes cluster); the environment's
    // kubeconfig is the platform team's.
    let kcp = crate::kcp_sharded::sharded().await?;
    if kcp.real.is_none() {
        kcp.env
            .sim
            .write_kubeconfig(&kcp.env.kubeconfig, "platform")?;
    }
    let name = CONSUMER.trim_start_matches("root:");
    anyhow::ensure!(kcp.consumer(name, "shard-1") == CONSUMER);
    Ok(kcp)
}

/// kubectl's error when holdfast refuses deleting the Workspace `path`, which
/// holds `blockers`.
pub fn workspace_denial(path: &str, blockers: &str) -> String {
    let refusal = crate::denied_by(
        "workspaces.holdfast.dev",
        &format!(
            "holdfast: Workspace {path} holds objects that are protected from deletion: \
             {blockers} (policy: containment), so it cannot be deleted: that would delete \
             them all, unchecked. To delete it, first lift the protection of those objects \
             (or delete them, or set the annotation holdfast.dev/skip-protection=true on \
             each if you are allowed to bypass protection): kcp deletes a workspace's \
             contents past holdfast, so the annotation on the Workspace itself is not \
             honoured while it holds protected objects."
        ),
    );
    format!("Error from server (Forbidden): {refusal}\n")
}

/// A ResourceProtection that carries the protection label itself.
pub const PROTECTED_POLICY: &str = "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\n\
    metadata:\n  name: keep\n  labels: {holdfast.dev/protected: \"Always\"}\nspec:\n  resources:\n  \
    - {group: \"\", version: v1, resource: configmaps}\n";

/// kubectl's error when holdfast refuses deleting the APIBinding `holdfast` while
/// [`PROTECTED_POLICY`] is protected.
pub fn binding_denial() -> String {
    let refusal = crate::denied_by(
        "containment.holdfast.dev",
        "holdfast: APIBinding holdfast binds the types of objects that are protected from \
         deletion: ResourceProtection keep (label) (policy: containment), so it cannot be \
         deleted: unbinding deletes every object of those types. To delete it, first lift the \
         protection of those objects (or delete them), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection on the \
         APIBinding.",
    );
    format!("Error from server (Forbidden): {refusal}\n")
}

/// What kcp shows of the objects the workspace tests make (docs/kcp-facts.md 33-35),
/// checked alike on the real kcp and the simulator: `org` a Workspace created in
/// root without a type, `team` one below it placed on shard `shard-1`, `binding`
/// the APIBinding `holdfast`, `slice` the endpoint slice of the export
/// `holdfast.dev` of `root:holdfast`.
pub fn assert_kcp_shapes(
    org: &serde_json::Value,
    team: &serde_json::Value,
    binding: &serde_json::Value,
    slice: &serde_json::Value,
) {
    let has = |o: &serde_json::Value, f: &str| {
        o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == f))
    };
    assert_eq!(org["spec"]["type"]["name"], "organization", "{org}");
    assert_eq!(team["spec"]["type"]["name"], "universal", "{team}");
    // kcp's ByBase36Sha224NameValue("shard-1").
    assert_eq!(
        team["metadata"]["annotations"]["internal.tenancy.kcp.io/shard"], "2e1tfbst",
        "{team}"
    );
    assert!(has(team, "core.kcp.io/logicalcluster"), "{team}");
    assert!(
        has(binding, "apis.kcp.io/apibinding-finalizer"),
        "{binding}"
    );
    assert_eq!(slice["spec"]["export"]["path"], "root:holdfast", "{slice}");
    let owner = &slice["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"]),
        (&"APIExport".into(), &"holdfast.dev".into()),
        "{slice}"
    );
}

/// `kubectl holdfast ARGS` with `kubeconfig` at workspace URL `server` (the plugin's
/// binary, as kubectl runs it).
pub fn holdfast_plugin(
    kubeconfig: &std::path::Path,
    server: &str,
    args: &[&str],
) -> crate::KubectlOutput {
    let bin = crate::bin("kubectl-holdfast").unwrap_or_else(|e| panic!("kubectl-holdfast: {e:#}"));
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--server", server])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl-holdfast: {e}"));
    crate::KubectlOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The binding to holdfast.dev of [`crate::kcp_sharded::holdfast_binding`] without
/// accepting the claim on core Events.
pub fn holdfast_binding_without_events() -> String {
    let all = crate::kcp_sharded::holdfast_binding();
    let events = "  - group: \"\"\n    resource: events\n    selector: {matchAll: true}\n    \
                  verbs: [create, patch]\n    state: Accepted\n";
    assert!(all.contains(events), "the events claim of {all}");
    all.replace(events, "")
}

/// The kinds of the findings of `kubectl holdfast check -o json` output `stdout`.
pub fn finding_kinds(stdout: &str) -> Vec<String> {
    let report: serde_json::Value = serde_json::from_str(stdout).unwrap_or_default();
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str().map(str::to_string))
        .collect()
}

/// kubectl arguments printing the APIBinding `holdfast`'s deletion condition as
/// `status/reason/message` (kcp's `BindingResourceDeleteSuccess`, kcp-facts 34).
pub const BINDING_DELETION: [&str; 5] = [
    "get",
    "apibinding",
    "holdfast",
    "-o",
    "jsonpath={range .status.conditions[?(@.type==\"BindingResourceDeleteSuccess\")]}{.status}/{.reason}/{.message}{end}",
];

/// What holdfast says refusing the DELETE of [`PROTECTED_POLICY`].
pub const LABEL_REFUSAL: &str = "is protected by label holdfast.dev/protected=Always";

/// kubectl arguments listing every Event of a workspace as JSON.
pub const EVENTS: [&str; 5] = ["get", "events", "-A", "-o", "json"];

/// How many of the Events in `list` (the JSON of [`EVENTS`]) are holdfast's
/// `DeletionBlocked` about an object named `name`.
pub fn blocked_events(list: &str, name: &str) -> usize {
    let list: serde_json::Value = serde_json::from_str(list).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["reason"] == "DeletionBlocked"
                && (e["involvedObject"]["name"] == name || e["regarding"]["name"] == name)
        })
        .count()
}

/// The APIExport `claims.test.io` of a provider: no types of its own, a claim on
/// the consumer's ConfigMaps (kcp-facts 26).
pub const CLAIMS_EXPORT: &str = r#"apiVersion: apis.kcp.io/v1alpha2
kind: APIExport
metadata: {name: claims.test.io}
spec:
  permissionClaims:
  - group: ""
    resource: configmaps
    verbs: [get, list, watch, update, patch, delete]
"#;

/// The consumer's binding to `claims.test.io`, accepting its claim.
pub const CLAIMS_BINDING: &str = r#"apiVersion: apis.kcp.io/v1alpha2
kind: APIBinding
metadata: {name: claims}
spec:
  reference: {export: {path: "root:compute", name: claims.test.io}}
  permissionClaims:
  - group: ""
    resource: configmaps
    selector: {matchAll: true}
    verbs: [get, list, watch, update, patch, delete]
    state: Accepted
"#;
