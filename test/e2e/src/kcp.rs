//! The seed 003 kcp topology on the sim, shared by the kcp end-to-end tests: a
//! holdfast workspace with holdfast's APIExport (deployed from manifests/kcp with
//! `kubectl apply -k`), a compute provider (`root:compute`), a network provider
//! nested two levels deep (`root:providers:network`), and a consumer binding both.

use crate::{Env, KubectlOutput};
use std::path::Path;

/// The network provider's workspace path.
pub const NETWORK: &str = "root:providers:network";

/// A sim with the topology set up.
pub struct Kcp {
    /// The environment (sim, webhook...).
    pub env: Env,
    /// The sim's base URL (front-proxy).
    pub url: String,
    /// A kubeconfig pointing at the holdfast workspace.
    pub kubeconfig: String,
}

impl Kcp {
    /// URL of workspace `path`.
    pub fn ws(&self, path: &str) -> String {
        format!("{}/clusters/{path}", self.url)
    }

    /// `kubectl apply` in workspace `path`; panics on failure (test helper).
    pub fn apply(&self, path: &str, manifest: &str) {
        let server = self.ws(path);
        let out = self
            .env
            .kubectl_stdin(&["--server", &server, "apply", "-f", "-"], manifest)
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        assert_eq!(out.code, 0, "apply in {path}: {out:?}\n{manifest}");
    }

    /// kubectl in workspace `path`.
    pub fn kubectl(&self, path: &str, args: &[&str]) -> KubectlOutput {
        let server = self.ws(path);
        let mut all = vec!["--server", server.as_str()];
        all.extend_from_slice(args);
        self.env
            .kubectl(&all)
            .unwrap_or_else(|e| panic!("kubectl: {e}"))
    }
}

impl Kcp {
    /// `kubectl get ARGS -o json` in workspace `path`; panics unless kubectl exits 0.
    pub fn get_json(&self, path: &str, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        self.kubectl(path, &all)
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
        crate::controller::wait_condition_at(&self.env, Some(&at), query, 30)
            .await
            .unwrap_or_else(|e| panic!("in {path}: {e:#}"))
    }

    /// Whether `kubectl get ARGS` in workspace `path` finds the object: NotFound is
    /// `false`, any other failure panics (a failing kubectl never reads as absent).
    pub fn exists(&self, path: &str, args: &[&str]) -> bool {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        let out = self.kubectl(path, &all);
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

/// An APIBinding to `path`/`export`, optionally accepting the webhook claim.
pub fn binding(name: &str, path: &str, export: &str, accept_webhooks: bool) -> String {
    let claims = if accept_webhooks {
        r#"
  permissionClaims:
  - {group: admissionregistration.k8s.io, resource: validatingwebhookconfigurations, selector: {matchAll: true}, verbs: ["*"], state: Accepted}"#
    } else {
        ""
    };
    format!(
        "apiVersion: apis.kcp.io/v1alpha2\nkind: APIBinding\nmetadata: {{name: {name}}}\nspec:\n  reference: {{export: {{path: \"{path}\", name: {export}}}}}{claims}\n"
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

/// Sets up the topology on a fresh sim.
pub async fn topology() -> anyhow::Result<Kcp> {
    // kcp: always a sim of its own (HOLDFAST_E2E_KUBECONFIG is a Kubernetes cluster).
    let env = Env::start_with(holdfast_sim::SimConfig::default()).await?;
    let url = env.sim.url();
    let kcp = Kcp {
        kubeconfig: String::new(),
        env,
        url,
    };
    for ws in ["holdfast", "compute", "providers", "consumer"] {
        kcp.apply("root", &workspace(ws));
    }
    kcp.apply("root:providers", &workspace("network"));

    // holdfast's API, as a user deploys it.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/kcp");
    let out = kcp.kubectl("root:holdfast", &["apply", "-k", &dir.to_string_lossy()]);
    anyhow::ensure!(out.code == 0, "apply -k manifests/kcp: {out:?}");
    kcp.apply(
        "root:holdfast",
        "apiVersion: apis.kcp.io/v1alpha1\nkind: APIExportEndpointSlice\nmetadata: {name: holdfast.dev}\nspec: {export: {path: \"root:holdfast\", name: holdfast.dev}}\n",
    );

    // Providers export their types and bind holdfast (accepting the webhook claim).
    kcp.apply(
        "root:compute",
        &schema("compute.test.io", "virtualmachines", "VirtualMachine"),
    );
    kcp.apply(
        "root:compute",
        &export("compute.test.io", &["v1.virtualmachines.compute.test.io"]),
    );
    kcp.apply(
        "root:compute",
        &binding("holdfast", "root:holdfast", "holdfast.dev", true),
    );
    kcp.apply(NETWORK, &schema("network.test.io", "vpcs", "VPC"));
    kcp.apply(NETWORK, &schema("network.test.io", "subnets", "Subnet"));
    kcp.apply(
        NETWORK,
        &export(
            "network.test.io",
            &["v1.vpcs.network.test.io", "v1.subnets.network.test.io"],
        ),
    );
    kcp.apply(
        NETWORK,
        &binding("holdfast", "root:holdfast", "holdfast.dev", true),
    );
    // The consumer binds both providers.
    kcp.apply(
        "root:consumer",
        &binding("compute", "root:compute", "compute.test.io", false),
    );
    kcp.apply(
        "root:consumer",
        &binding("network", NETWORK, "network.test.io", false),
    );
    kcp.env
        .kubectl_until(
            &[
                "--server",
                &kcp.ws("root:compute"),
                "get",
                "dependencyrules",
            ],
            10,
            |o| o.code == 0,
        )
        .await?;
    let kubeconfig = kcp.env.dir.path().join("holdfast-ws.kubeconfig");
    std::fs::write(
        &kubeconfig,
        kcp.env
            .sim
            .kubeconfig_for_server(&kcp.ws("root:holdfast"), "admin"),
    )?;
    Ok(Kcp {
        kubeconfig: kubeconfig.to_string_lossy().into_owned(),
        ..kcp
    })
}
