//! Deferred deletion: a VPC asked to go while a VirtualMachine still uses it is
//! deleted by holdfast, as the user who asked, right after its last VM.
//! Runs after the DependencyRule story (its CRDs and rule `vm-dependencies`).

use crate::runner::{Demo, Expect};
use holdfast_e2e::{Env, steps::merge_patch};
use holdfast_shared::deferred::{issued_signature, request_patch, signed_request_patch};

fn users() -> String {
    holdfast_e2e::fixtures::documents(&[
        holdfast_e2e::fixtures::user_cluster_role(
            "vpc-owner",
            "alice",
            &["{apiGroups: [network.test.io], resources: [vpcs], verbs: [get, patch, delete]}"],
        ),
        holdfast_e2e::fixtures::user_cluster_role(
            "vpc-editor",
            "bob",
            &["{apiGroups: [network.test.io], resources: [vpcs], verbs: [get, patch]}"],
        ),
    ])
}

const NETWORK: &str = "apiVersion: network.test.io/v1
kind: VPC
metadata: {name: shared-vpc, namespace: default}
---
apiVersion: compute.test.io/v1
kind: VirtualMachine
metadata: {name: app-vm, namespace: default}
spec: {vpcRef: {name: shared-vpc}}
";

/// kubectl's arguments for `user` asking, with `patch`, for the deferred deletion of
/// VPC shared-vpc.
fn asks<'a>(user: &'a str, patch: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--as", user];
    args.extend(merge_patch("vpc shared-vpc", patch));
    args
}

/// kubectl's arguments printing the Events of namespace default with `output`.
fn events_in_default(output: &str) -> [&str; 6] {
    ["get", "events.events.k8s.io", "-n", "default", "-o", output]
}

/// Deferred deletion: asked while blocked, done once unblocked.
pub async fn deferred(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "Deferred deletion — delete it as soon as nothing blocks it",
        "issue 16: holdfast.dev/delete-when-unblocked, carried out as the user who asked",
    );
    demo.say("alice may delete VPCs; bob may only edit them");
    demo.apply(
        env,
        None,
        &users(),
        &[
            "clusterrole.rbac.authorization.k8s.io/vpc-owner created",
            "clusterrolebinding.rbac.authorization.k8s.io/vpc-editor created",
        ],
    )?;
    demo.say("A VPC and a VirtualMachine using it");
    demo.apply(
        env,
        None,
        NETWORK,
        &[
            "vpc.network.test.io/shared-vpc created",
            "virtualmachine.compute.test.io/app-vm created",
        ],
    )?;
    demo.run(
        env,
        &["--as", "alice", "delete", "vpc", "shared-vpc"],
        Expect::Refused,
        &[
            "holdfast: VPC default/shared-vpc is still referenced by VirtualMachine default/app-vm",
            "To have holdfast delete it once nothing blocks it, ask for deferred deletion (holdfast.dev/delete-when-unblocked).",
        ],
    )?;

    demo.say("bob cannot ask: he may not delete it himself");
    demo.run(
        env,
        &asks("bob", &request_patch("bob")),
        Expect::Refused,
        &["holdfast: user \"bob\" may not ask for the deferred deletion of VPC default/shared-vpc: that takes the permission to delete it (verb delete on vpcs.network.test.io in namespace default)"],
    )?;

    demo.note("holdfast signs requests with a key the controller keeps in its own namespace");
    // An installation has its namespace; a bare demo cluster may not yet.
    let _ = env.kubectl(&["create", "namespace", "holdfast-system"]);
    demo.settle(
        env,
        &[
            "get",
            "secret",
            "holdfast-deferred-deletion-key",
            "-n",
            "holdfast-system",
            "-o",
            "name",
        ],
        30,
        |o| o.code == 0,
    )
    .await;
    demo.say(
        "alice asks for deferred deletion: holdfast answers with a signature for her and this VPC",
    );
    let answer = demo.run(
        env,
        &asks("alice", &request_patch("alice")),
        Expect::Refused,
        &["holdfast: to confirm the deferred deletion request on VPC default/shared-vpc, set the annotation holdfast.dev/delete-request-signature"],
    )?;
    let signature = issued_signature(&answer.text)
        .unwrap_or_default()
        .to_string();
    demo.say("alice confirms with it (the controller deletes only what holdfast signed)");
    demo.run(
        env,
        &asks("alice", &signed_request_patch("alice", &signature)),
        Expect::Succeeds,
        &["vpc.network.test.io/shared-vpc patched"],
    )?;
    demo.note(
        "the controller tries the DELETE as alice; the DependencyRule refuses it, so the VPC stays",
    );
    demo.settle(
        env,
        &events_in_default(
            "jsonpath={.items[?(@.reason==\"DeferredDeletionWaiting\")].regarding.name}",
        ),
        30,
        |o| o.code == 0 && o.stdout.split_whitespace().any(|n| n == "shared-vpc"),
    )
    .await;
    demo.succeeds(
        env,
        "get vpc shared-vpc -o name",
        "vpc.network.test.io/shared-vpc",
    )?;

    demo.say("The last VM goes: holdfast deletes the VPC as alice");
    demo.succeeds(
        env,
        "delete virtualmachine app-vm",
        "virtualmachine.compute.test.io \"app-vm\" deleted",
    )?;
    demo.settle(env, &["get", "vpc", "shared-vpc"], 60, |o| o.is_not_found())
        .await;
    demo.run(
        env,
        &events_in_default("jsonpath={range .items[?(@.reason==\"DeferredDeletion\")]}{.regarding.kind}/{.regarding.name}: {.note}{\"\\n\"}{end}"),
        Expect::Succeeds,
        &["VPC/shared-vpc: deleted by holdfast as \"alice\", who asked for it with holdfast.dev/delete-when-unblocked"],
    )?;
    Ok(())
}
