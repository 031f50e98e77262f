//! Server-side defaulting of the built-in kinds kubectl users create most (apps/v1
//! workloads, pods), as kube-apiserver's scheme defaulters do.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

fn set_default(v: &mut Value, key: &str, d: Value) {
    if v.is_object() && v[key].is_null() {
        v[key] = d;
    }
}

fn container(c: &mut Value) {
    let image = c["image"].as_str().unwrap_or("").to_string();
    let tag = image.rsplit('/').next().unwrap_or("");
    let latest = !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest"));
    set_default(
        c,
        "imagePullPolicy",
        json!(if latest { "Always" } else { "IfNotPresent" }),
    );
    set_default(c, "resources", json!({}));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if let Some(ports) = c.get_mut("ports").and_then(|p| p.as_array_mut()) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

pub fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for key in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(key).and_then(|c| c.as_array_mut()) {
            cs.iter_mut().filter(|c| c.is_object()).for_each(container);
        }
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
}

fn template_spec(obj: &mut Value) {
    if let Some(spec) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("template"))
        .and_then(|t| t.get_mut("spec"))
    {
        pod_spec(spec);
    }
}

pub fn apply(info: &ResourceInfo, obj: &mut Value) {
    if !obj.get("spec").is_some_and(|s| s.is_object()) && info.resource != "secrets" {
        if info.resource == "services" && info.group.is_empty() {
            obj["spec"] = json!({});
        } else {
            return;
        }
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("apps", "deployments") => {
            let spec = &mut obj["spec"];
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            set_default(spec, "strategy", json!({}));
            if let Some(strategy) = spec.get_mut("strategy").filter(|s| s.is_object()) {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy["type"] == "RollingUpdate" {
                    set_default(strategy, "rollingUpdate", json!({}));
                    if let Some(ru) = strategy.get_mut("rollingUpdate") {
                        set_default(ru, "maxSurge", json!("25%"));
                        set_default(ru, "maxUnavailable", json!("25%"));
                    }
                }
            }
            template_spec(obj);
        }
        ("apps", "statefulsets") => {
            let spec = &mut obj["spec"];
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            template_spec(obj);
        }
        ("apps", "daemonsets") => {
            let spec = &mut obj["spec"];
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
            );
            template_spec(obj);
        }
        ("apps", "replicasets") => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            template_spec(obj);
        }
        ("batch", "jobs") | ("batch", "cronjobs") => {}
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec") {
                pod_spec(spec);
            }
        }
        ("", "secrets") => {
            set_default(obj, "type", json!("Opaque"));
            // stringData is write-only: merged into data (base64) on every write.
            if let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|m| m.remove("stringData"))
            {
                use base64::Engine;
                if !obj["data"].is_object() {
                    obj["data"] = json!({});
                }
                if !obj.is_object() {
                    return;
                }
                for (k, v) in sd {
                    let text = v.as_str().unwrap_or("").to_string();
                    obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
                }
            }
        }
        ("", "services") => {
            let spec = &mut obj["spec"];
            set_default(spec, "type", json!("ClusterIP"));
            set_default(spec, "sessionAffinity", json!("None"));
            if spec["type"] != "ExternalName" && spec["clusterIP"].is_null() {
                use rand::Rng;
                let mut r = rand::rng();
                let ip = format!(
                    "10.96.{}.{}",
                    r.random_range(0..=255u8),
                    r.random_range(1..=254u8)
                );
                spec["clusterIP"] = json!(ip);
                spec["clusterIPs"] = json!([ip]);
                set_default(spec, "ipFamilies", json!(["IPv4"]));
                set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
                set_default(spec, "internalTrafficPolicy", json!("Cluster"));
            }
            if let Some(ports) = spec.get_mut("ports").and_then(|p| p.as_array_mut()) {
                for p in ports.iter_mut().filter(|p| p.is_object()) {
                    set_default(p, "protocol", json!("TCP"));
                    if p["targetPort"].is_null() {
                        p["targetPort"] = p["port"].clone();
                    }
                }
            }
        }
        _ => {}
    }
}
