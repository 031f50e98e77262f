//! `holdfast-demo --kubeconfig FILE --webhook-host ADDR` on a cluster it knows
//! only by its kubeconfig: here a separately started `holdfast-sim` process. The
//! demo runs its Kubernetes stories, leaves nothing behind, and refuses to start
//! (touching nothing) when an object it would create already exists.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use holdfast_e2e::{bin, kubectl_path, steps::words};

/// A `holdfast-sim` process and the admin kubeconfig it wrote.
struct Cluster {
    child: Child,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(bin("holdfast-sim").expect("holdfast-sim binary"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(dir.path().join("kubeconfig"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("holdfast-sim starts");
        // It prints its address once the kubeconfig is written and it listens.
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read");
        assert!(
            line.starts_with("holdfast-sim listening on https://127.0.0.1:"),
            "{line:?}"
        );
        Cluster { child, dir }
    }

    fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(kubectl_path().expect("kubectl"))
            .env("KUBECONFIG", self.kubeconfig())
            .args(args)
            .output()
            .expect("kubectl runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Everything a user can see of the kinds the demo touches, by name.
    fn objects(&self) -> String {
        let (code, out, err) = self.kubectl(&words(
            "get validatingwebhookconfigurations,customresourcedefinitions,namespaces -o name",
        ));
        assert_eq!(code, 0, "{err}");
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn demo(kubeconfig: &Path) -> (i32, String, String) {
    let out = Command::new(bin("holdfast-demo").expect("holdfast-demo binary"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--webhook-host", "127.0.0.1"])
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("demo runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const INITIAL: &str =
    "namespace/default\nnamespace/kube-node-lease\nnamespace/kube-public\nnamespace/kube-system\n";

#[test]
fn the_demo_runs_on_any_kubeconfig_and_cleans_up() {
    let cluster = Cluster::start();
    assert_eq!(cluster.objects(), INITIAL);
    let (code, out, err) = demo(&cluster.kubeconfig());
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.ends_with("every outcome as expected\n"),
        "stdout:\n{out}"
    );
    assert!(
        out.contains("cleaned up: the cluster holds nothing the demo created\n"),
        "{out}"
    );
    for step in [
        "$ kubectl delete namespace shop\nError from server (Forbidden): admission webhook \"delete-label-0.holdfast.dev\" denied the request: holdfast: Namespace shop is protected by label holdfast.dev/protected=Always",
        "$ kubectl delete widget w2\nError from server (Forbidden): admission webhook \"policies-1.holdfast.dev\" denied the request: holdfast: Widget default/w2 is protected by ResourceProtection/widgets",
    ] {
        assert!(out.contains(step), "missing {step:?} in:\n{out}");
    }
    // Nothing left: no configuration, no CRDs (holdfast's were installed by the
    // demo), no namespace.
    assert_eq!(cluster.objects(), INITIAL);
}

#[test]
fn the_demo_refuses_to_touch_objects_it_did_not_create() {
    let cluster = Cluster::start();
    let (code, _, err) = cluster.kubectl(&["create", "namespace", "shop"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cluster.kubectl(&["label", "namespace", "shop", "owner=someone-else"]);
    assert_eq!(code, 0, "{err}");
    let before = cluster.objects();
    let (code, out, err) = demo(&cluster.kubeconfig());
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        err,
        "Error: the demo could not run to the end: refusing to run: namespace shop already \
         exists on this cluster (the demo creates and deletes it)\n"
    );
    assert_eq!(cluster.objects(), before);
    let (code, labels, err) = cluster.kubectl(&words(
        "get namespace shop -o jsonpath={.metadata.labels.owner}",
    ));
    assert_eq!((code, labels.as_str()), (0, "someone-else"), "{err}");
}

#[test]
fn bad_demo_arguments_are_usage_errors() {
    for (args, want) in [
        (
            vec!["--webhook-host", "10.0.0.1"],
            "holdfast-demo: error: --webhook-host needs --kubeconfig\n",
        ),
        (
            vec!["--kubeconfig"],
            "holdfast-demo: error: --kubeconfig needs a value\n",
        ),
        (
            vec!["--nope"],
            "holdfast-demo: error: unknown argument \"--nope\"; usage: holdfast-demo [--kubeconfig FILE [--webhook-host ADDR]]\n",
        ),
    ] {
        let out = Command::new(bin("holdfast-demo").expect("binary"))
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
}
