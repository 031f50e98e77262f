//! The `karmada` backend: a real Karmada v1.18.2 control plane and one member
//! cluster, on 127.0.0.1, from the binaries `hack/substrates.sh karmada kube etcd`
//! builds (see `docs/substrates-notes.md`, "Karmada control plane").
//!
//! The control plane: etcd and kube-apiserver v1.36 as karmada-apiserver (with the
//! aggregation flags), Karmada's CRDs applied server-side from the karmada module
//! source in the Go module cache, karmada-aggregated-apiserver (`cluster.karmada.io`)
//! behind an ExternalName Service and an APIService, karmada-webhook with the
//! mutating and validating configurations `karmadactl init` installs, a
//! kube-controller-manager running the controllers Karmada runs against its API
//! server (namespace deletion, garbage collection, ServiceAccount tokens),
//! karmada-controller-manager and karmada-scheduler. The member: the `kube` backend (etcd,
//! kube-apiserver, kube-controller-manager), joined as `karmadactl join` does in
//! Push mode: a ServiceAccount with cluster-admin on the member, its token and the
//! member's CA in the Secret `karmada-cluster/<member>` on karmada-apiserver, and a
//! `Cluster` naming them. Ready once the Cluster is Ready.

use super::{
    Proc, kube::KubeBackend, pki, procs_logs, start_etcd, start_on_free_port, substrate_bin,
    wait_for, wait_readyz,
};
use anyhow::{Context, bail};
use rcgen::{ExtendedKeyUsagePurpose, KeyPair};
use serde_json::{Value, json};
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// The Karmada release whose module source holds the CRDs and webhook
/// configurations (the one `hack/substrates.sh karmada` builds).
pub const KARMADA_MODULE: &str = "github.com/karmada-io/karmada@v1.18.2";

/// The member cluster's name in Karmada.
pub const MEMBER: &str = "member1";

/// What to run when something is missing.
const BUILD_HINT: &str = "run hack/substrates.sh karmada kube etcd";

const LOGS: [&str; 7] = [
    "etcd",
    "karmada-apiserver",
    "karmada-aggregated-apiserver",
    "karmada-webhook",
    "kube-controller-manager",
    "karmada-controller-manager",
    "karmada-scheduler",
];

/// A running Karmada control plane with one member cluster; everything stops
/// when it drops.
pub struct KarmadaBackend {
    /// The admin kubeconfig of karmada-apiserver (client certificate in
    /// `system:masters`).
    pub kubeconfig: PathBuf,
    /// karmada-apiserver's URL.
    pub url: String,
    /// The admin kubeconfig of the member cluster.
    pub member_kubeconfig: PathBuf,
    /// The member's name in Karmada ([`MEMBER`]).
    pub member_name: String,
    /// How long each step of the start took, from the start (seconds).
    pub timings: Vec<(String, f64)>,
    // Dropped in reverse order by `Drop`; the member after them.
    procs: Vec<Proc>,
    member: KubeBackend,
}

/// The karmada module's source in the Go module cache.
pub fn module_dir() -> anyhow::Result<PathBuf> {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .with_context(|| format!("running `go env GOMODCACHE` ({BUILD_HINT})"))?;
    if !out.status.success() {
        bail!(
            "go env GOMODCACHE: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join(KARMADA_MODULE);
    if !dir.join("charts/karmada/_crds/bases").is_dir() {
        bail!(
            "Karmada's source {} is not in the Go module cache: {BUILD_HINT}",
            dir.display()
        );
    }
    Ok(dir)
}

/// Fails, saying [`BUILD_HINT`], unless every binary and source the backend
/// needs is there.
pub fn check_built() -> anyhow::Result<()> {
    for (c, b) in [
        ("kube", "kube-apiserver"),
        ("kube", "kube-controller-manager"),
        ("kube", "kubectl"),
        ("etcd", "etcd"),
        ("karmada", "karmada-aggregated-apiserver"),
        ("karmada", "karmada-webhook"),
        ("karmada", "karmada-controller-manager"),
        ("karmada", "karmada-scheduler"),
    ] {
        let p = substrate_bin(c)
            .with_context(|| BUILD_HINT.to_string())?
            .join(b);
        if !p.is_file() && b == "karmada-scheduler" {
            bail!(
                "{} is not built: hack/substrates.sh does not build Karmada's cmd/scheduler yet \
                 (add github.com/karmada-io/karmada/cmd/scheduler to its karmada packages and \
                 to hack/substrates/karmada/tools.go, then {BUILD_HINT})",
                p.display()
            );
        }
        if !p.is_file() {
            bail!("{} is not built: {BUILD_HINT}", p.display());
        }
    }
    module_dir().map(|_| ())
}

/// kubectl with one kubeconfig.
struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn output(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<std::process::Output> {
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl")?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Runs kubectl; its standard output, or an error with what it printed.
    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run_stdin(args, None)
    }

    fn run_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let out = self.output(args, stdin)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn apply(&self, manifest: &Value) -> anyhow::Result<String> {
        self.run_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()))
    }

    /// Whether `kubectl ARGS` exits 0 and prints something.
    fn prints(&self, args: &[&str]) -> bool {
        self.output(args, None)
            .is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty())
    }
}

/// The YAML of the Go format string of `func NAME(` in `source`.
fn go_format_string(source: &str, func: &str) -> anyhow::Result<String> {
    let at = source
        .find(&format!("func {func}("))
        .with_context(|| format!("no func {func} in Karmada's webhook_configuration.go"))?;
    let start = source[at..]
        .find("fmt.Sprintf(`")
        .map(|i| at + i + "fmt.Sprintf(`".len())
        .with_context(|| format!("no format string in func {func}"))?;
    let len = source[start..]
        .find('`')
        .with_context(|| format!("unterminated format string in func {func}"))?;
    Ok(source[start..start + len].to_string())
}

impl KarmadaBackend {
    /// Starts the control plane and the member with state in `dir` (the member
    /// under `dir/member`), joins the member, and waits until the controller
    /// manager leads and the member's Cluster is Ready.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        check_built()?;
        std::fs::create_dir_all(dir)?;
        let started = Instant::now();
        let member_dir = dir.join("member");
        let (member, plane) =
            tokio::join!(KubeBackend::start(&member_dir), Plane::start(dir, started));
        let member = member.context("starting the member cluster (the kube backend)")?;
        let mut plane = plane?;
        plane.mark("member cluster ready (in parallel)", started);
        let kubectl = Kubectl {
            bin: substrate_bin("kube")?.join("kubectl"),
            kubeconfig: plane.kubeconfig.clone(),
        };
        join_member(&kubectl, &member, MEMBER)
            .await
            .with_context(|| procs_logs(dir, &LOGS))?;
        plane.mark("Cluster Ready", started);
        Ok(Self {
            kubeconfig: plane.kubeconfig,
            url: plane.url,
            member_kubeconfig: member.kubeconfig.clone(),
            member_name: MEMBER.to_string(),
            timings: plane.timings,
            procs: plane.procs,
            member,
        })
    }

    /// Whether every process of the control plane and of the member still runs.
    pub fn alive(&mut self) -> bool {
        self.procs.iter_mut().all(Proc::alive) && self.member.alive()
    }
}

impl Drop for KarmadaBackend {
    fn drop(&mut self) {
        while let Some(p) = self.procs.pop() {
            drop(p);
        }
    }
}

/// The control plane being started.
struct Plane {
    kubeconfig: PathBuf,
    url: String,
    procs: Vec<Proc>,
    timings: Vec<(String, f64)>,
}

impl Plane {
    fn mark(&mut self, what: &str, since: Instant) {
        self.timings
            .push((what.to_string(), since.elapsed().as_secs_f64()));
    }

    async fn start(dir: &Path, t0: Instant) -> anyhow::Result<Self> {
        let kube_bin = substrate_bin("kube")?;
        let etcd_bin = substrate_bin("etcd")?.join("etcd");
        let karmada_bin = substrate_bin("karmada")?;
        let km = module_dir()?;
        let pki_dir = dir.join("pki");
        std::fs::create_dir_all(&pki_dir)?;
        let w = |name: &str, data: &str| -> anyhow::Result<String> {
            let p = pki_dir.join(name);
            std::fs::write(&p, data).with_context(|| p.display().to_string())?;
            Ok(p.display().to_string())
        };
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let ca = pki::ca("holdfast-e2e karmada CA")?;
        let ca_file = w("ca.crt", &ca.pem)?;
        let fp_ca = pki::ca("holdfast-e2e karmada front-proxy CA")?;
        let fp_ca_file = w("front-proxy-ca.crt", &fp_ca.pem)?;
        let (c, k) = pki::leaf(
            &ca,
            "karmada-apiserver",
            None,
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "10.96.0.1",
            ],
            ServerAuth,
        )?;
        let (srv_crt, srv_key) = (w("apiserver.crt", &c)?, w("apiserver.key", &k)?);
        let (adm_crt, adm_key) = pki::leaf(
            &ca,
            "holdfast-e2e-admin",
            Some("system:masters"),
            &[],
            ClientAuth,
        )?;
        let (kcm_crt, kcm_key) =
            pki::leaf(&ca, "system:kube-controller-manager", None, &[], ClientAuth)?;
        let (c, k) = pki::leaf(
            &ca,
            "karmada-aggregated-apiserver",
            None,
            &[
                "127.0.0.1",
                "localhost",
                "karmada-aggregated-apiserver.karmada-system.svc",
            ],
            ServerAuth,
        )?;
        let (agg_crt, agg_key) = (w("aggregated.crt", &c)?, w("aggregated.key", &k)?);
        let (c, k) = pki::leaf(&fp_ca, "front-proxy-client", None, &[], ClientAuth)?;
        let (fp_crt, fp_key) = (
            w("front-proxy-client.crt", &c)?,
            w("front-proxy-client.key", &k)?,
        );
        // karmada-webhook reads tls.crt/tls.key from its --cert-dir.
        let (c, k) = pki::leaf(
            &ca,
            "karmada-webhook",
            None,
            &["127.0.0.1", "localhost"],
            ServerAuth,
        )?;
        let certs = dir.join("webhook-certs");
        std::fs::create_dir_all(&certs)?;
        std::fs::write(certs.join("tls.crt"), c)?;
        std::fs::write(certs.join("tls.key"), k)?;
        let sa = KeyPair::generate()?;
        let sa_key = w("sa.key", &sa.serialize_pem())?;
        let sa_pub = w("sa.pub", &sa.public_key_pem())?;

        let mut plane = Plane {
            kubeconfig: dir.join("admin.kubeconfig"),
            url: String::new(),
            procs: Vec::new(),
            timings: Vec::new(),
        };
        let etcd = start_etcd(&etcd_bin, dir).await?;
        let etcd_url = etcd.url.clone();
        plane.procs.push(etcd.proc);
        plane.mark("etcd listening", t0);

        let (apiserver, url) = start_on_free_port("karmada-apiserver", dir, |port| {
            let mut c = Command::new(kube_bin.join("kube-apiserver"));
            c.args([
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--etcd-servers={etcd_url}"),
                &format!("--tls-cert-file={srv_crt}"),
                &format!("--tls-private-key-file={srv_key}"),
                &format!("--client-ca-file={ca_file}"),
                "--authorization-mode=RBAC",
                // The admission plugins Karmada's chart disables.
                "--disable-admission-plugins=StorageObjectInUseProtection,ServiceAccount",
                &format!("--service-account-key-file={sa_pub}"),
                &format!("--service-account-signing-key-file={sa_key}"),
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                // What the aggregation (cluster.karmada.io) needs.
                &format!("--proxy-client-cert-file={fp_crt}"),
                &format!("--proxy-client-key-file={fp_key}"),
                &format!("--requestheader-client-ca-file={fp_ca_file}"),
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--profiling=false",
                "--v=1",
            ]);
            (c, format!("https://127.0.0.1:{port}"))
        })
        .await?;
        plane.procs.push(apiserver);
        std::fs::write(
            &plane.kubeconfig,
            pki::cert_kubeconfig(&url, &ca.pem, &adm_crt, &adm_key),
        )?;
        plane.url = url.clone();
        let kubectl = Kubectl {
            bin: kube_bin.join("kubectl"),
            kubeconfig: plane.kubeconfig.clone(),
        };
        wait_readyz(&kubectl.bin, &plane.kubeconfig)
            .await
            .with_context(|| procs_logs(dir, &LOGS))?;
        plane.mark("karmada-apiserver ready", t0);

        // Karmada's CRDs (too big for client-side apply's annotation) and its
        // namespaces.
        let crds = km.join("charts/karmada/_crds/bases");
        kubectl.run(&[
            "apply",
            "--server-side",
            "--recursive",
            "-f",
            &crds.to_string_lossy(),
        ])?;
        for ns in ["karmada-system", "karmada-cluster"] {
            kubectl.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"karmada.io/system": "true"}}}))?;
        }
        kubectl.run(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=120s",
        ])?;
        plane.mark("Karmada's CRDs established", t0);

        // kube-controller-manager with the controllers Karmada runs against
        // karmada-apiserver (`karmadactl init`), minus the CSR signing ones.
        let kcm_kubeconfig = dir.join("kcm.kubeconfig");
        std::fs::write(
            &kcm_kubeconfig,
            pki::cert_kubeconfig(&url, &ca.pem, &kcm_crt, &kcm_key),
        )?;
        let kcm_kc = kcm_kubeconfig.display().to_string();
        let mut c = Command::new(kube_bin.join("kube-controller-manager"));
        c.args([
            &format!("--kubeconfig={kcm_kc}"),
            &format!("--authentication-kubeconfig={kcm_kc}"),
            &format!("--authorization-kubeconfig={kcm_kc}"),
            &format!("--service-account-private-key-file={sa_key}"),
            &format!("--root-ca-file={ca_file}"),
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--controllers=namespace,garbagecollector,serviceaccount-token,ttl-after-finished,clusterrole-aggregation",
            "--v=1",
        ]);
        plane
            .procs
            .push(Proc::spawn("kube-controller-manager", dir, c)?);

        // karmada-aggregated-apiserver, reached through an ExternalName Service.
        let admin_kc = plane.kubeconfig.display().to_string();
        let (agg, agg_url) = start_on_free_port("karmada-aggregated-apiserver", dir, |port| {
            let mut c = Command::new(karmada_bin.join("karmada-aggregated-apiserver"));
            c.args([
                &format!("--kubeconfig={admin_kc}"),
                &format!("--authentication-kubeconfig={admin_kc}"),
                &format!("--authorization-kubeconfig={admin_kc}"),
                &format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--tls-cert-file={agg_crt}"),
                &format!("--tls-private-key-file={agg_key}"),
                "--profiling=false",
            ]);
            (c, port.to_string())
        })
        .await?;
        plane.procs.push(agg);
        let ca_b64 = crate::base64_encode(ca.pem.as_bytes());
        kubectl.apply(&json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "karmada-aggregated-apiserver", "namespace": "karmada-system"},
            "spec": {"type": "ExternalName", "externalName": "localhost"}}))?;
        kubectl.apply(
            &json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1alpha1.cluster.karmada.io"},
            "spec": {"group": "cluster.karmada.io", "version": "v1alpha1",
                "groupPriorityMinimum": 2000, "versionPriority": 10, "caBundle": ca_b64,
                "service": {"name": "karmada-aggregated-apiserver", "namespace": "karmada-system",
                    "port": agg_url.parse::<u16>()?}}}),
        )?;
        kubectl
            .run(&[
                "wait",
                "--for=condition=Available",
                "apiservice/v1alpha1.cluster.karmada.io",
                "--timeout=120s",
            ])
            .with_context(|| procs_logs(dir, &LOGS))?;
        plane.mark("cluster.karmada.io Available", t0);

        // karmada-webhook (no health checks of its own: no probe port).
        let certs_dir = certs.display().to_string();
        let (webhook, webhook_host) = start_on_free_port("karmada-webhook", dir, |port| {
            let mut c = Command::new(karmada_bin.join("karmada-webhook"));
            c.args([
                &format!("--kubeconfig={admin_kc}"),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--cert-dir={certs_dir}"),
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
            ]);
            (c, format!("127.0.0.1:{port}"))
        })
        .await?;
        plane.procs.push(webhook);
        plane.mark("karmada-webhook listening", t0);
        // Its configurations as `karmadactl init` installs them, called by URL.
        let source = std::fs::read_to_string(
            km.join("pkg/karmadactl/cmdinit/karmada/webhook_configuration.go"),
        )
        .context("Karmada's webhook_configuration.go")?;
        for func in ["mutatingConfig", "validatingConfig"] {
            let yaml = go_format_string(&source, func)?
                .replace("%[2]s", &ca_b64)
                .replace("karmada-webhook.%[1]s.svc:443", &webhook_host);
            if yaml.contains("%[") {
                bail!("Karmada's {func} has a placeholder this backend does not fill: {yaml}");
            }
            kubectl.run_stdin(&["apply", "-f", "-"], Some(&yaml))?;
        }
        plane.mark("Karmada's webhook configurations applied", t0);

        // karmada-controller-manager: ready once it leads.
        let mut c = Command::new(karmada_bin.join("karmada-controller-manager"));
        c.args([
            &format!("--kubeconfig={admin_kc}"),
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--v=2",
        ]);
        plane
            .procs
            .push(Proc::spawn("karmada-controller-manager", dir, c)?);
        wait_for(
            "karmada-controller-manager's lease",
            Duration::from_secs(120),
            || {
                kubectl.prints(&[
                    "get",
                    "lease",
                    "karmada-controller-manager",
                    "-n",
                    "karmada-system",
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])
            },
        )
        .await
        .with_context(|| procs_logs(dir, &LOGS))?;
        plane.mark("karmada-controller-manager leads", t0);

        // karmada-scheduler: places ResourceBindings on clusters (nothing but
        // namespaces propagates without it); ready once it leads.
        let mut c = Command::new(karmada_bin.join("karmada-scheduler"));
        c.args([
            &format!("--kubeconfig={admin_kc}"),
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--v=2",
        ]);
        plane.procs.push(Proc::spawn("karmada-scheduler", dir, c)?);
        wait_for(
            "karmada-scheduler's lease",
            Duration::from_secs(120),
            || {
                kubectl.prints(&[
                    "get",
                    "lease",
                    "karmada-scheduler",
                    "-n",
                    "karmada-system",
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])
            },
        )
        .await
        .with_context(|| procs_logs(dir, &LOGS))?;
        plane.mark("karmada-scheduler leads", t0);
        for p in plane.procs.iter_mut() {
            if !p.alive() {
                bail!("{} exited: {}", p.name(), p.log());
            }
        }
        Ok(plane)
    }
}

/// Joins `member` to the control plane of `karmada` as `karmadactl join` does
/// in Push mode, and waits until its Cluster is Ready.
async fn join_member(karmada: &Kubectl, member: &KubeBackend, name: &str) -> anyhow::Result<()> {
    let m = Kubectl {
        bin: karmada.bin.clone(),
        kubeconfig: member.kubeconfig.clone(),
    };
    // On the member: a ServiceAccount allowed everything, and its token Secret
    // (filled by the member's kube-controller-manager).
    let sa = format!("karmada-{name}");
    m.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "karmada-cluster"}}))?;
    m.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": sa, "namespace": "karmada-cluster"}}))?;
    m.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "karmada-cluster"}]}))?;
    m.apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": sa, "namespace": "karmada-cluster",
            "annotations": {"kubernetes.io/service-account.name": sa}}}),
    )?;
    let token_args = [
        "get",
        "secret",
        &sa,
        "-n",
        "karmada-cluster",
        "-o",
        "jsonpath={.data.token}",
    ];
    wait_for(
        "the member's ServiceAccount token",
        Duration::from_secs(60),
        || m.prints(&token_args),
    )
    .await?;
    let token_b64 = m.run(&token_args)?;
    let ca_b64 = m.run(&[
        "get",
        "secret",
        &sa,
        "-n",
        "karmada-cluster",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ])?;
    let id = m.run(&[
        "get",
        "namespace",
        "kube-system",
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;
    let server = m.run(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ])?;
    // On karmada-apiserver: the Secret and the Cluster.
    karmada.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "karmada-cluster"},
        "data": {"caBundle": ca_b64.trim(), "token": token_b64.trim()}}))?;
    karmada.apply(
        &json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"id": id.trim(), "syncMode": "Push", "apiEndpoint": server.trim(),
            "secretRef": {"namespace": "karmada-cluster", "name": name}}}),
    )?;
    let ready = [
        "get",
        "cluster",
        name,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ];
    wait_for(
        "the member's Cluster Ready",
        Duration::from_secs(120),
        || {
            karmada
                .output(&ready, None)
                .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"True")
        },
    )
    .await
    .with_context(|| {
        format!(
            "Cluster {name}: {}",
            karmada
                .run(&["get", "cluster", name, "-o", "json"])
                .unwrap_or_else(|e| e.to_string())
        )
    })
}
