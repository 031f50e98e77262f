//! Packaging: the Dockerfile and the rendered manifests agree (binary names, user,
//! ports, pinned version), the Deployments carry the hardened securityContext,
//! requests/limits and a preStop delay that fits the termination grace period,
//! and the optional components render and point at what they name.

use std::{collections::BTreeMap, path::Path};

use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `kubectl kustomize DIR` parsed into its documents.
fn render(dir: &Path) -> Vec<Value> {
    holdfast_e2e::steps::kustomize(dir)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} not rendered"))
}

/// One final stage of the Dockerfile.
#[derive(Debug, Default)]
struct Stage {
    base: String,
    user: String,
    expose: Vec<u16>,
    entrypoint: Vec<String>,
    copies: Vec<String>,
}

/// The Dockerfile's stages by name (`FROM base AS name`).
fn dockerfile() -> BTreeMap<String, Stage> {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let mut stages = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("FROM") => {
                let base = words.next().expect("FROM has a base").to_string();
                assert_eq!(words.next(), Some("AS"), "every stage is named: {line}");
                let name = words.next().expect("stage name").to_string();
                stages.insert(
                    name.clone(),
                    Stage {
                        base,
                        ..Stage::default()
                    },
                );
                current = Some(name);
            }
            Some(instr) => {
                let Some(stage) = current.as_ref().and_then(|n| stages.get_mut(n)) else {
                    continue;
                };
                let rest: Vec<&str> = words.collect();
                match instr {
                    "USER" => stage.user = rest.join(" "),
                    "EXPOSE" => stage
                        .expose
                        .extend(rest.iter().map(|p| p.parse::<u16>().expect("port"))),
                    "ENTRYPOINT" => {
                        stage.entrypoint = serde_json::from_str(&rest.join(" "))
                            .expect("ENTRYPOINT is a JSON list")
                    }
                    "COPY" => stage.copies.push(rest.join(" ")),
                    _ => {}
                }
            }
            None => {}
        }
    }
    stages
}

fn container(deploy: &Value) -> &Value {
    let containers = deploy["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{deploy}");
    &containers[0]
}

fn arg_value<'a>(c: &'a Value, flag: &str) -> Option<&'a str> {
    c["args"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
}

#[test]
fn dockerfile_and_manifests_agree() {
    let stages = dockerfile();
    let version = env!("CARGO_PKG_VERSION");
    for overlay in ["kubernetes", "karmada/host", "kcp"] {
        let docs = render(&repo().join("manifests/overlays").join(overlay));
        for binary in ["holdfast-webhook", "holdfast-controller"] {
            let stage = stages
                .get(binary)
                .unwrap_or_else(|| panic!("Dockerfile has no stage {binary}: {stages:?}"));
            // A small image: the static binary alone, run as a numeric non-root user.
            assert_eq!(stage.base, "scratch", "{binary}");
            assert_eq!(stage.entrypoint, vec![format!("/{binary}")], "{binary}");
            assert_eq!(
                stage.copies,
                vec![format!("--from=build /out/{binary} /{binary}")],
                "{binary}"
            );
            let cargo = std::fs::read_to_string(
                repo()
                    .join(binary.trim_start_matches("holdfast-"))
                    .join("Cargo.toml"),
            )
            .expect("crate manifest");
            assert!(
                cargo.contains(&format!("name = \"{binary}\"")),
                "{binary} is a package of the workspace"
            );
            assert_eq!(stage.user, "65532:65532", "{binary}");

            let deploy = find(&docs, "Deployment", binary);
            let pod = &deploy["spec"]["template"]["spec"];
            let c = container(deploy);
            assert_eq!(
                c["image"],
                format!("ghcr.io/holdfast-dev/{binary}:{version}"),
                "{overlay}: the image pins the workspace version"
            );
            assert_eq!(
                pod["securityContext"],
                json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                       "seccompProfile": {"type": "RuntimeDefault"}}),
                "{overlay} {binary}"
            );
            assert_eq!(
                c["securityContext"],
                json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                       "capabilities": {"drop": ["ALL"]}}),
                "{overlay} {binary}"
            );
            for kind in ["requests", "limits"] {
                for res in ["cpu", "memory"] {
                    assert!(
                        c["resources"][kind][res].is_string(),
                        "{overlay} {binary}: resources.{kind}.{res} missing: {}",
                        c["resources"]
                    );
                }
            }
            let mut ports: Vec<u16> = c["ports"]
                .as_array()
                .expect("ports")
                .iter()
                .map(|p| p["containerPort"].as_u64().expect("port") as u16)
                .collect();
            ports.sort_unstable();
            let mut exposed = stage.expose.clone();
            exposed.sort_unstable();
            assert_eq!(ports, exposed, "{overlay} {binary}: ports vs EXPOSE");
            // Each declared port is the one the binary is told to listen on.
            for (flag, name) in [("--listen", "https"), ("--probe-listen", "probes")] {
                let Some(listen) = arg_value(c, flag) else {
                    continue;
                };
                let port = c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["name"] == name)
                    .unwrap_or_else(|| panic!("{binary}: no port named {name}"));
                assert_eq!(
                    listen.rsplit(':').next(),
                    Some(port["containerPort"].to_string().as_str()),
                    "{overlay} {binary}: {flag}"
                );
            }
        }
        // The webhook keeps serving through the preStop delay, then drains within
        // the grace period.
        let deploy = find(&docs, "Deployment", "holdfast-webhook");
        let c = container(deploy);
        let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .expect("preStop sleep");
        let drain: u64 = arg_value(c, "--shutdown-grace-seconds")
            .expect("--shutdown-grace-seconds")
            .parse()
            .expect("number");
        let grace = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds");
        assert!(pre_stop >= 5, "{overlay}: preStop {pre_stop}s");
        assert!(
            pre_stop + drain < grace,
            "{overlay}: preStop {pre_stop}s + drain {drain}s must end before {grace}s"
        );
        // The webhook's Service reaches the container's https port.
        let svc = find(&docs, "Service", "holdfast-webhook");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "https");
        // PodDisruptionBudgets by default.
        assert_eq!(
            find(&docs, "PodDisruptionBudget", "holdfast-webhook")["spec"]["minAvailable"],
            1
        );
    }
    let all = std::process::Command::new("grep")
        .args(["-rn", ":latest"])
        .arg(repo().join("manifests"))
        .output()
        .expect("grep");
    assert_eq!(
        all.status.code(),
        Some(1),
        "no image floats: {}",
        String::from_utf8_lossy(&all.stdout)
    );
}

/// The optional components render on top of the Kubernetes overlay and name
/// the ports and labels the Deployments declare.
#[test]
fn optional_components_render() {
    // kustomize takes relative paths only: a throwaway overlay beside the others.
    let dir = tempfile::tempdir_in(repo().join("manifests/overlays")).expect("tempdir");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n- ../kubernetes\n\
         components:\n- ../../components/network-policy\n- ../../components/service-monitor\n\
         - ../../components/prometheus-rule\n",
    )
    .expect("write");
    let docs = render(dir.path());
    let webhook = container(find(&docs, "Deployment", "holdfast-webhook"));
    let port_of = |name: &str| -> u64 {
        webhook["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no port {name}"))
    };

    let np = find(&docs, "NetworkPolicy", "holdfast-webhook");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "holdfast-webhook"
    );
    let ingress_ports: Vec<u64> = np["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| p["port"].as_u64().expect("port"))
        .collect();
    assert_eq!(ingress_ports, vec![port_of("https"), port_of("probes")]);
    let np = find(&docs, "NetworkPolicy", "holdfast-controller");
    let controller = container(find(&docs, "Deployment", "holdfast-controller"));
    let probes = controller["ports"][0]["containerPort"].clone();
    assert_eq!(controller["ports"][0]["name"], "probes");
    assert_eq!(
        np["spec"]["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"holdfast.dev/scrape": "true"}}}],
            "ports": [{"protocol": "TCP", "port": probes}],
        }])
    );
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));

    let svc = find(&docs, "Service", "holdfast-webhook-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "probes");
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/name"],
        "holdfast-webhook"
    );
    let sm = find(&docs, "ServiceMonitor", "holdfast-webhook");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "holdfast-webhook"})
    );
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    // Each target's job is what the alerts select (prometheus-rule component).
    for name in ["holdfast-webhook", "holdfast-controller"] {
        let sm = find(&docs, "ServiceMonitor", name);
        assert_eq!(sm["spec"]["jobLabel"], "app.kubernetes.io/name");
        let svc = find(&docs, "Service", &format!("{name}-metrics"));
        assert_eq!(svc["metadata"]["labels"]["app.kubernetes.io/name"], name);
        assert_eq!(
            sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            name
        );
        assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/name"], name);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "probes");
    }
    let rule = find(&docs, "PrometheusRule", "holdfast");
    assert_eq!(rule["metadata"]["namespace"], "holdfast-system");
    assert!(
        rule["spec"]["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
    );
    // The metrics Service must not be picked up as the admission Service.
    let admission = find(&docs, "Service", "holdfast-webhook");
    assert_eq!(admission["spec"]["ports"].as_array().map(Vec::len), Some(1));
}

/// The krew manifest `hack/krew-manifest.sh` writes names the archive it made, by
/// this platform, with its sha256, and the archive holds the plugin's binary.
#[test]
fn the_krew_manifest_names_the_archive_it_made() {
    let bin = holdfast_e2e::bin("kubectl-holdfast").expect("kubectl-holdfast");
    let out = tempfile::tempdir().expect("tempdir");
    let run = std::process::Command::new("bash")
        .arg(repo().join("hack/krew-manifest.sh"))
        .arg(out.path())
        .arg("https://releases.example/holdfast/")
        .arg(&bin)
        .output()
        .expect("run hack/krew-manifest.sh");
    assert!(run.status.success(), "{run:?}");
    let text = std::fs::read_to_string(out.path().join("holdfast.yaml")).expect("manifest");
    let m: Value = serde_saphyr::from_str(&text).expect("yaml");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.io/v1alpha2"
    );
    assert_eq!(
        (&m["kind"], &m["metadata"]["name"]),
        (&"Plugin".into(), &"holdfast".into())
    );
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(m["spec"]["version"], version.as_str());
    let platforms = m["spec"]["platforms"].as_array().expect("platforms");
    assert_eq!(platforms.len(), 1, "{m}");
    let p = &platforms[0];
    assert_eq!(p["bin"], "kubectl-holdfast");
    assert_eq!(
        p["files"],
        serde_json::json!([{"from": "kubectl-holdfast", "to": "."}])
    );
    assert_eq!(p["selector"]["matchLabels"]["os"], std::env::consts::OS);
    let uri = p["uri"].as_str().expect("uri");
    let archive = uri
        .strip_prefix("https://releases.example/holdfast/")
        .expect("under the base URL");
    assert!(
        archive.starts_with(&format!("kubectl-holdfast_{version}_")),
        "{uri}"
    );
    let sum = std::process::Command::new("sha256sum")
        .arg(out.path().join(archive))
        .output()
        .expect("sha256sum");
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert_eq!(
        p["sha256"],
        sum.split_whitespace().next().unwrap_or_default()
    );
    let listing = std::process::Command::new("tar")
        .arg("tzf")
        .arg(out.path().join(archive))
        .output()
        .expect("tar");
    assert_eq!(
        String::from_utf8_lossy(&listing.stdout),
        "kubectl-holdfast\n"
    );
}
