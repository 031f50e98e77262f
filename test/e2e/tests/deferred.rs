//! Deferred deletion end to end: the real webhook, the real controller running as
//! its ServiceAccount with the shipped RBAC, real kubectl. A request
//! (`holdfast.dev/delete-when-unblocked`) is admitted only from a user who may
//! delete the object; the controller deletes the object as that user once nothing
//! blocks it, and Events record who asked.

use holdfast_e2e::{
    Env,
    controller::ControllerProcess,
    fixtures,
    steps::{
        self, as_user, controller_as, install_controller_rbac, merge_patch, refused, start_webhook,
        with_users, words,
    },
};
use holdfast_shared::deferred::request_patch;
use holdfast_sim::SimConfig;
use serde_json::Value;

/// Who may delete VPCs, VirtualMachines and namespaces (alice), and who may only
/// create and edit VPCs (bob).
fn users_rbac() -> String {
    let everyday = "verbs: [get, list, patch, update, delete]";
    fixtures::documents(&[
        fixtures::user_cluster_role(
            "e2e-owner",
            "alice",
            &[
                &format!(
                    "{{apiGroups: [network.test.io, compute.test.io], resources: [vpcs, virtualmachines], {everyday}}}"
                ),
                &format!("{{apiGroups: [\"\"], resources: [namespaces, configmaps], {everyday}}}"),
            ],
        ),
        fixtures::user_cluster_role(
            "e2e-editor",
            "bob",
            &[
                "{apiGroups: [network.test.io], resources: [vpcs], verbs: [get, list, create, patch, update]}",
            ],
        ),
    ])
}

/// Sim with the shipped ServiceAccounts and two users, holdfast's CRDs and RBAC,
/// the VPC/VM types and their DependencyRule, the webhook, and the controller as
/// its ServiceAccount; returns once VPC DELETEs are refused while referenced.
async fn stack() -> (Env, ControllerProcess) {
    let cfg = with_users(
        holdfast_e2e::with_service_accounts(SimConfig::default()),
        &["alice", "bob"],
        "system:authenticated",
    );
    let mut env = Env::start_with(cfg).await.expect("sim");
    let kubeconfig = install_controller_rbac(&env);
    env.apply(&fixtures::vpc_vm_crds()).expect("VPC/VM CRDs");
    env.wait_served(&["vpcs"]).await;
    env.apply(&users_rbac()).expect("users' RBAC");
    env.apply(&fixtures::vm_vpc_rule(".spec.vpcRef.name"))
        .expect("rule");
    let port = start_webhook(&mut env, &[]).await;
    let c = controller_as(&env, port, "controller", &kubeconfig, &[]).await;
    (env, c)
}

fn vm(name: &str, vpc: &str) -> String {
    format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: {name}, namespace: default}}\nspec: {{vpcRef: {{name: {vpc}}}}}\n"
    )
}

fn vpc(name: &str) -> String {
    format!(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: {name}, namespace: default}}\n"
    )
}

async fn wait_gone(env: &Env, args: &[&str], c: &ControllerProcess) {
    steps::wait_gone(env, args, 60, c).await;
}

/// `user` asks for the deferred deletion of `target` (e.g. `vpc net`), naming
/// `requester` as the one asking.
fn ask(env: &Env, user: &str, target: &str, requester: &str) -> holdfast_e2e::KubectlOutput {
    as_user(env, user, &merge_patch(target, &request_patch(requester)))
}

/// Waits for the one DeferredDeletion Event about `name` (of `kind`): holdfast
/// deleted it as alice; returns the Events.
async fn deleted_by_alice(env: &Env, name: &str, kind: &str) -> Vec<Value> {
    let done = env
        .wait_events("DeferredDeletion", name, 30)
        .await
        .expect("deletion event");
    assert_eq!(notes(&done), vec![DELETED_BY_ALICE.to_string()]);
    assert_eq!(done[0]["regarding"]["kind"], kind, "{done:?}");
    done
}

/// The notes of the Events with `reason` about `name`.
fn notes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        .collect()
}

const DELETED_BY_ALICE: &str = "deleted by holdfast as \"alice\", who asked for it with \
     holdfast.dev/delete-when-unblocked (holdfast.dev/delete-requested-by), now that nothing \
     blocks it";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpc_goes_right_after_its_last_vm() {
    let (env, c) = stack().await;
    env.apply(&vpc("my-vpc")).expect("vpc");
    env.apply(&vm("my-vm", "my-vpc")).expect("vm");
    // Protected while referenced, once the controller routes VPC DELETEs.
    let out = env
        .until_failed(&["delete", "vpc", "my-vpc", "--dry-run=server"])
        .await;
    assert_eq!(
        out.stderr,
        "Error from server (Forbidden): admission webhook \"policies-0.holdfast.dev\" denied \
         the request: holdfast: VPC default/my-vpc is still referenced by VirtualMachine \
         default/my-vm (policy: DependencyRule/vm-dependencies, field .spec.vpcRef.name of \
         virtualmachines.compute.test.io), so it cannot be deleted. To delete it, delete or \
         change the dependents first, or set the annotation holdfast.dev/skip-protection=true \
         if you are allowed to bypass protection. To have holdfast delete it once nothing \
         blocks it, ask for deferred deletion (holdfast.dev/delete-when-unblocked).\n"
    );

    // Alice may delete it: her request is admitted.
    steps::deleted(
        &ask(&env, "alice", "vpc my-vpc", "alice"),
        "vpc.network.test.io/my-vpc patched\n",
    );

    // Only changes of the request reach the webhook: an unrelated label does not,
    // while changing the requester does (and is refused: bob is not alice).
    let updates = env.webhook_reviews("UPDATE").await.expect("metrics");
    env.run(&["label", "vpc", "my-vpc", "team=network"]);
    assert_eq!(
        env.webhook_reviews("UPDATE").await.expect("metrics"),
        updates
    );
    let out = env.attempt(&words(
        "annotate --overwrite vpc my-vpc holdfast.dev/delete-requested-by=bob",
    ));
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        env.webhook_reviews("UPDATE").await.expect("metrics"),
        updates + 1
    );

    // The controller tries, as alice, and is refused by the policy: it says so once
    // and the VPC stays.
    let waiting = env
        .wait_events("DeferredDeletionWaiting", "my-vpc", 60)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller log:\n{}", c.log()));
    assert_eq!(
        notes(&waiting),
        vec![
            "deletion requested by \"alice\" waits: admission webhook \"policies-0.holdfast.dev\" \
             denied the request: holdfast: VPC default/my-vpc is still referenced by \
             VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies, field \
             .spec.vpcRef.name of virtualmachines.compute.test.io), so it cannot be deleted. To \
             delete it, delete or change the dependents first, or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection. To have \
             holdfast delete it once nothing blocks it, ask for deferred deletion \
             (holdfast.dev/delete-when-unblocked)."
                .to_string()
        ]
    );
    assert_eq!(waiting[0]["regarding"]["kind"], "VPC", "{waiting:?}");
    let still = env
        .get_json(&["vpc", "my-vpc"])
        .expect("the VPC is still there");
    assert!(still["metadata"]["deletionTimestamp"].is_null(), "{still}");

    // The last VM goes: the VPC follows, deleted as alice.
    env.run(&["delete", "virtualmachine", "my-vm"]);
    wait_gone(&env, &["get", "vpc", "my-vpc"], &c).await;
    let done = deleted_by_alice(&env, "my-vpc", "VPC").await;
    assert_eq!(done[0]["regarding"]["namespace"], "default", "{done:?}");
    assert_eq!(done[0]["type"], "Normal", "{done:?}");
    assert!(
        done[0]["eventTime"].as_str().is_some_and(|t| !t.is_empty()),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_waits_for_its_protected_contents() {
    let (env, c) = stack().await;
    env.run(&["create", "namespace", "shop"]);
    env.run(&words("create configmap keep -n shop --from-literal=a=b"));
    env.run(&words(
        "label configmap keep -n shop holdfast.dev/protected=true",
    ));
    env.until_failed(&["delete", "namespace", "shop", "--dry-run=server"])
        .await;

    steps::deleted(
        &ask(&env, "alice", "namespace shop", "alice"),
        "namespace/shop patched\n",
    );
    let waiting = env
        .wait_events("DeferredDeletionWaiting", "shop", 60)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller log:\n{}", c.log()));
    let note = notes(&waiting).join("\n");
    assert!(
        note.starts_with("deletion requested by \"alice\" waits: admission webhook \"containment.holdfast.dev\" denied the request: holdfast: Namespace shop "),
        "{note}"
    );
    assert!(note.contains("ConfigMap shop/keep"), "{note}");
    let ns = env.get_json(&["namespace", "shop"]).expect("still there");
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");

    // The protection of its content goes: the namespace follows (and takes the
    // ConfigMap with it).
    env.run(&words(
        "label configmap keep -n shop holdfast.dev/protected-",
    ));
    wait_gone(&env, &["get", "namespace", "shop"], &c).await;
    deleted_by_alice(&env, "shop", "Namespace").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_who_may_delete_can_ask() {
    // The controller installs the webhook configuration routing the requests.
    let (env, _controller) = stack().await;
    env.apply(&vpc("net")).expect("vpc");
    let refusal = |msg: &str| {
        format!(
            "Error from server (Forbidden): admission webhook \"deferred.holdfast.dev\" denied \
             the request: holdfast: {msg}\n"
        )
    };
    let refusal_on_create = |msg: &str| {
        refusal(msg).replacen(
            "(Forbidden): ",
            "(Forbidden): error when creating \"STDIN\": ",
            1,
        )
    };
    // The refusal when bob names alice as the one asking for VPC default/`vpc`.
    let not_you = |vpc: &str| {
        format!(
            "cannot accept the deferred deletion request on VPC default/{vpc}: the annotation \
             holdfast.dev/delete-requested-by must name you, \"bob\" (it is \"alice\"). Set all \
             three in one request: kubectl patch vpcs.network.test.io {vpc} -n default --type \
             merge -p '{{\"metadata\":{{\"annotations\":{{\"holdfast.dev/delete-requested-by\":\
             \"bob\",\"holdfast.dev/delete-when-unblocked\":\"true\"}},\"labels\":{{\
             \"holdfast.dev/delete-when-unblocked\":\"true\"}}}}}}'"
        )
    };
    // Bob may edit the VPC but not delete it.
    let out = ask(&env, "bob", "vpc net", "bob");
    refused(
        &out,
        &refusal(
            "user \"bob\" may not ask for the deferred deletion of VPC default/net: that takes \
             the permission to delete it (verb delete on vpcs.network.test.io in namespace \
             default), which \"bob\" does not hold as holdfast will use it: it deletes the \
             object later by impersonating the user name alone, without the groups of this \
             request.",
        ),
    );
    // Naming someone who may delete it does not help.
    let out = ask(&env, "bob", "vpc net", "alice");
    refused(&out, &refusal(&not_you("net")));
    // Nor does creating an object with a request in it (the env's admin
    // impersonates bob: the API server judges the CREATE as bob).
    let mut manifest: Value = serde_json::from_str(&request_patch("alice")).expect("json");
    manifest["apiVersion"] = "network.test.io/v1".into();
    manifest["kind"] = "VPC".into();
    manifest["metadata"]["name"] = "other".into();
    manifest["metadata"]["namespace"] = "default".into();
    let out = env
        .kubectl_stdin(&["create", "--as", "bob", "-f", "-"], &manifest.to_string())
        .expect("kubectl runs");
    refused(&out, &refusal_on_create(&not_you("other")));
    assert!(env.get_json(&["vpc", "other"]).is_err(), "not created");
    // Nothing was marked, and the VPC is untouched.
    let net = env.get_json(&["vpc", "net"]).expect("vpc");
    for key in [
        "holdfast.dev/delete-when-unblocked",
        "holdfast.dev/delete-requested-by",
    ] {
        assert!(net["metadata"]["annotations"][key].is_null(), "{net}");
    }
    assert!(net["metadata"]["labels"].is_null(), "{net}");
}
