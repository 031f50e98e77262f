//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the built-in
//! kinds kubectl's typed clients send (kubectl create namespace/configmap/secret/
//! serviceaccount/service/deployment, DeleteOptions...). Schema-driven, subset only.

use base64::Engine;
use serde_json::{Map, Value, json};

#[derive(Clone, Copy)]
enum K {
    /// string, omitted when empty
    Str,
    /// int, omitted when zero
    Int,
    /// optional (pointer) int, kept
    IntP,
    /// bool, omitted when false
    Bool,
    /// optional (pointer) bool, kept
    BoolP,
    Time,
    IntOrStr,
    Msg(&'static [F]),
    MapStr,
    MapBytes,
    MapQuantity,
    RepStr,
    RepMsg(&'static [F]),
}

type F = (u32, &'static str, K);

const TIME_FIELDS: &[F] = &[];
const OWNER_REF: &[F] = &[
    (1, "kind", K::Str),
    (3, "name", K::Str),
    (4, "uid", K::Str),
    (5, "apiVersion", K::Str),
    (6, "controller", K::BoolP),
    (7, "blockOwnerDeletion", K::BoolP),
];
const OBJECT_META: &[F] = &[
    (1, "name", K::Str),
    (2, "generateName", K::Str),
    (3, "namespace", K::Str),
    (5, "uid", K::Str),
    (6, "resourceVersion", K::Str),
    (7, "generation", K::Int),
    (8, "creationTimestamp", K::Time),
    (9, "deletionTimestamp", K::Time),
    (10, "deletionGracePeriodSeconds", K::IntP),
    (11, "labels", K::MapStr),
    (12, "annotations", K::MapStr),
    (13, "ownerReferences", K::RepMsg(OWNER_REF)),
    (14, "finalizers", K::RepStr),
];
const LS_REQ: &[F] = &[
    (1, "key", K::Str),
    (2, "operator", K::Str),
    (3, "values", K::RepStr),
];
const LABEL_SELECTOR: &[F] = &[
    (1, "matchLabels", K::MapStr),
    (2, "matchExpressions", K::RepMsg(LS_REQ)),
];
const NS_SPEC: &[F] = &[(1, "finalizers", K::RepStr)];
const NS_STATUS: &[F] = &[(1, "phase", K::Str)];
const NAMESPACE: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(NS_SPEC)),
    (3, "status", K::Msg(NS_STATUS)),
];
const CONFIGMAP: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "data", K::MapStr),
    (3, "binaryData", K::MapBytes),
    (4, "immutable", K::BoolP),
];
const SECRET: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "data", K::MapBytes),
    (3, "type", K::Str),
    (4, "stringData", K::MapStr),
    (5, "immutable", K::BoolP),
];
const OBJECT_REF: &[F] = &[
    (1, "kind", K::Str),
    (2, "namespace", K::Str),
    (3, "name", K::Str),
    (4, "uid", K::Str),
    (5, "apiVersion", K::Str),
    (6, "resourceVersion", K::Str),
    (7, "fieldPath", K::Str),
];
const LOCAL_REF: &[F] = &[(1, "name", K::Str)];
const SERVICE_ACCOUNT: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "secrets", K::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", K::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", K::BoolP),
];
const SERVICE_PORT: &[F] = &[
    (1, "name", K::Str),
    (2, "protocol", K::Str),
    (3, "port", K::Int),
    (4, "targetPort", K::IntOrStr),
    (5, "nodePort", K::Int),
    (6, "appProtocol", K::Str),
];
const SERVICE_SPEC: &[F] = &[
    (1, "ports", K::RepMsg(SERVICE_PORT)),
    (2, "selector", K::MapStr),
    (3, "clusterIP", K::Str),
    (4, "type", K::Str),
    (5, "externalIPs", K::RepStr),
    (7, "sessionAffinity", K::Str),
    (11, "externalName", K::Str),
];
const SERVICE: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(SERVICE_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const CONTAINER_PORT: &[F] = &[
    (1, "name", K::Str),
    (2, "hostPort", K::Int),
    (3, "containerPort", K::Int),
    (4, "protocol", K::Str),
    (5, "hostIP", K::Str),
];
const ENV_VAR: &[F] = &[(1, "name", K::Str), (2, "value", K::Str)];
const RESOURCES: &[F] = &[
    (1, "limits", K::MapQuantity),
    (2, "requests", K::MapQuantity),
];
const CONTAINER: &[F] = &[
    (1, "name", K::Str),
    (2, "image", K::Str),
    (3, "command", K::RepStr),
    (4, "args", K::RepStr),
    (5, "workingDir", K::Str),
    (6, "ports", K::RepMsg(CONTAINER_PORT)),
    (7, "env", K::RepMsg(ENV_VAR)),
    (8, "resources", K::Msg(RESOURCES)),
    (13, "terminationMessagePath", K::Str),
    (14, "imagePullPolicy", K::Str),
    (16, "stdin", K::Bool),
    (17, "stdinOnce", K::Bool),
    (18, "tty", K::Bool),
    (20, "terminationMessagePolicy", K::Str),
];
const POD_SPEC: &[F] = &[
    (2, "containers", K::RepMsg(CONTAINER)),
    (3, "restartPolicy", K::Str),
    (4, "terminationGracePeriodSeconds", K::IntP),
    (6, "dnsPolicy", K::Str),
    (7, "nodeSelector", K::MapStr),
    (8, "serviceAccountName", K::Str),
    (10, "nodeName", K::Str),
    (14, "securityContext", K::Msg(TIME_FIELDS)),
    (19, "schedulerName", K::Str),
    (20, "initContainers", K::RepMsg(CONTAINER)),
];
const POD_TEMPLATE: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(POD_SPEC)),
];
const ROLLING: &[F] = &[
    (1, "maxUnavailable", K::IntOrStr),
    (2, "maxSurge", K::IntOrStr),
];
const STRATEGY: &[F] = &[(1, "type", K::Str), (2, "rollingUpdate", K::Msg(ROLLING))];
const DEPLOY_SPEC: &[F] = &[
    (1, "replicas", K::IntP),
    (2, "selector", K::Msg(LABEL_SELECTOR)),
    (3, "template", K::Msg(POD_TEMPLATE)),
    (4, "strategy", K::Msg(STRATEGY)),
    (5, "minReadySeconds", K::Int),
    (6, "revisionHistoryLimit", K::IntP),
    (7, "paused", K::Bool),
    (9, "progressDeadlineSeconds", K::IntP),
];
const DEPLOYMENT: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(DEPLOY_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const POD: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(POD_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const PRECONDITIONS: &[F] = &[(1, "uid", K::Str), (2, "resourceVersion", K::Str)];
const DELETE_OPTIONS: &[F] = &[
    (1, "gracePeriodSeconds", K::IntP),
    (2, "preconditions", K::Msg(PRECONDITIONS)),
    (3, "orphanDependents", K::BoolP),
    (4, "propagationPolicy", K::Str),
    (5, "dryRun", K::RepStr),
];
// k8s.io/api/rbac/v1 PolicyRule: verbs 1, apiGroups 2, resources 3,
// resourceNames 4, nonResourceURLs 5.
const POLICY_RULE: &[F] = &[
    (1, "verbs", K::RepStr),
    (2, "apiGroups", K::RepStr),
    (3, "resources", K::RepStr),
    (4, "resourceNames", K::RepStr),
    (5, "nonResourceURLs", K::RepStr),
];
const ROLE: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "rules", K::RepMsg(POLICY_RULE)),
];
const SUBJECT: &[F] = &[
    (1, "kind", K::Str),
    (2, "apiGroup", K::Str),
    (3, "name", K::Str),
    (4, "namespace", K::Str),
];
const ROLE_REF: &[F] = &[
    (1, "apiGroup", K::Str),
    (2, "kind", K::Str),
    (3, "name", K::Str),
];
const ROLE_BINDING: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "subjects", K::RepMsg(SUBJECT)),
    (3, "roleRef", K::Msg(ROLE_REF)),
];

const RESOURCE_ATTRS: &[F] = &[
    (1, "namespace", K::Str),
    (2, "verb", K::Str),
    (3, "group", K::Str),
    (4, "version", K::Str),
    (5, "resource", K::Str),
    (6, "subresource", K::Str),
    (7, "name", K::Str),
];
const NON_RESOURCE_ATTRS: &[F] = &[(1, "path", K::Str), (2, "verb", K::Str)];
const SAR_SPEC: &[F] = &[
    (1, "resourceAttributes", K::Msg(RESOURCE_ATTRS)),
    (2, "nonResourceAttributes", K::Msg(NON_RESOURCE_ATTRS)),
    (3, "user", K::Str),
    (4, "groups", K::RepStr),
    (6, "uid", K::Str),
];
const SELF_SAR_SPEC: &[F] = &[
    (1, "resourceAttributes", K::Msg(RESOURCE_ATTRS)),
    (2, "nonResourceAttributes", K::Msg(NON_RESOURCE_ATTRS)),
];
const SAR: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(SAR_SPEC)),
];
const SELF_SAR: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(SELF_SAR_SPEC)),
];
const SSRR_SPEC: &[F] = &[(1, "namespace", K::Str)];
const SSRR: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(SSRR_SPEC)),
];
const TOKEN_REVIEW_SPEC: &[F] = &[(1, "token", K::Str), (2, "audiences", K::RepStr)];
const TOKEN_REVIEW: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(TOKEN_REVIEW_SPEC)),
];

const JOB_SPEC: &[F] = &[
    (1, "parallelism", K::IntP),
    (2, "completions", K::IntP),
    (3, "activeDeadlineSeconds", K::IntP),
    (4, "selector", K::Msg(LABEL_SELECTOR)),
    (5, "manualSelector", K::BoolP),
    (6, "template", K::Msg(POD_TEMPLATE)),
    (7, "backoffLimit", K::IntP),
    (8, "ttlSecondsAfterFinished", K::IntP),
    (9, "completionMode", K::Str),
    (10, "suspend", K::BoolP),
];
const JOB: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(JOB_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const JOB_TEMPLATE: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(JOB_SPEC)),
];
const CRONJOB_SPEC: &[F] = &[
    (1, "schedule", K::Str),
    (2, "startingDeadlineSeconds", K::IntP),
    (3, "concurrencyPolicy", K::Str),
    (4, "suspend", K::BoolP),
    (5, "jobTemplate", K::Msg(JOB_TEMPLATE)),
    (6, "successfulJobsHistoryLimit", K::IntP),
    (7, "failedJobsHistoryLimit", K::IntP),
    (8, "timeZone", K::Str),
];
const CRONJOB: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(CRONJOB_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const PRIORITY_CLASS: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "value", K::IntP),
    (3, "globalDefault", K::Bool),
    (4, "description", K::Str),
    (5, "preemptionPolicy", K::Str),
];
const QUOTA_SPEC: &[F] = &[(1, "hard", K::MapQuantity), (2, "scopes", K::RepStr)];
const QUOTA: &[F] = &[
    (1, "metadata", K::Msg(OBJECT_META)),
    (2, "spec", K::Msg(QUOTA_SPEC)),
    (3, "status", K::Msg(TIME_FIELDS)),
];
const METADATA_ONLY: &[F] = &[(1, "metadata", K::Msg(OBJECT_META))];

fn schema_for(kind: &str) -> Option<&'static [F]> {
    Some(match kind {
        "Namespace" => NAMESPACE,
        "ConfigMap" => CONFIGMAP,
        "Secret" => SECRET,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "Service" => SERVICE,
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" => DEPLOYMENT,
        "Pod" => POD,
        "DeleteOptions" => DELETE_OPTIONS,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => SAR,
        "SelfSubjectAccessReview" => SELF_SAR,
        "SelfSubjectRulesReview" => SSRR,
        "TokenReview" => TOKEN_REVIEW,
        "SelfSubjectReview" => METADATA_ONLY,
        "Job" => JOB,
        "CronJob" => CRONJOB,
        "PriorityClass" => PRIORITY_CLASS,
        "ResourceQuota" => QUOTA,
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => ROLE_BINDING,
        _ => return None,
    })
}

struct Rd<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Rd<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = *self.b.get(self.i).ok_or("truncated varint")?;
            self.i += 1;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err("varint too long".into());
            }
        }
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()? as usize;
        let end = self.i.checked_add(n).ok_or("overflow")?;
        let s = self.b.get(self.i..end).ok_or("truncated field")?;
        self.i = end;
        Ok(s)
    }
    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
    /// Reads one field: (number, wire type, varint value or bytes)
    fn field(&mut self) -> Result<(u32, u64, &'a [u8]), String> {
        let tag = self.varint()?;
        let wt = tag & 7;
        let num = (tag >> 3) as u32;
        match wt {
            0 => Ok((num, self.varint()?, &[])),
            1 => {
                let s = self.b.get(self.i..self.i + 8).ok_or("truncated")?;
                self.i += 8;
                Ok((num, 0, s))
            }
            2 => Ok((num, 0, self.bytes()?)),
            5 => {
                let s = self.b.get(self.i..self.i + 4).ok_or("truncated")?;
                self.i += 4;
                Ok((num, 0, s))
            }
            _ => Err(format!("unsupported wire type {wt}")),
        }
    }
}

fn str_of(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8".to_string())
}

fn map_entry(b: &[u8]) -> Result<(String, &[u8]), String> {
    let mut r = Rd { b, i: 0 };
    let mut k = String::new();
    let mut v: &[u8] = &[];
    while !r.done() {
        let (n, _, d) = r.field()?;
        match n {
            1 => k = str_of(d)?,
            2 => v = d,
            _ => {}
        }
    }
    Ok((k, v))
}

fn decode_time(b: &[u8]) -> Result<Value, String> {
    let mut r = Rd { b, i: 0 };
    let mut secs = 0i64;
    while !r.done() {
        let (n, v, _) = r.field()?;
        if n == 1 {
            secs = v as i64;
        }
    }
    if secs == 0 {
        return Ok(Value::Null);
    }
    Ok(chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
        .unwrap_or(Value::Null))
}

fn decode_msg(b: &[u8], schema: &[F]) -> Result<Value, String> {
    let mut r = Rd { b, i: 0 };
    let mut m = Map::new();
    while !r.done() {
        let (n, v, d) = r.field()?;
        let Some((_, name, kind)) = schema.iter().find(|f| f.0 == n) else {
            continue;
        };
        let name = name.to_string();
        match kind {
            K::Str => {
                let s = str_of(d)?;
                if !s.is_empty() {
                    m.insert(name, json!(s));
                }
            }
            K::Int => {
                if v != 0 {
                    m.insert(name, json!(v as i64));
                }
            }
            K::IntP => {
                m.insert(name, json!(v as i64));
            }
            K::Bool => {
                if v != 0 {
                    m.insert(name, json!(true));
                }
            }
            K::BoolP => {
                m.insert(name, json!(v != 0));
            }
            K::Time => {
                let t = decode_time(d)?;
                if !t.is_null() {
                    m.insert(name, t);
                }
            }
            K::IntOrStr => {
                let mut rr = Rd { b: d, i: 0 };
                let (mut ty, mut iv, mut sv) = (0u64, 0i64, String::new());
                while !rr.done() {
                    let (fnum, fv, fd) = rr.field()?;
                    match fnum {
                        1 => ty = fv,
                        2 => iv = fv as i64,
                        3 => sv = str_of(fd)?,
                        _ => {}
                    }
                }
                m.insert(name, if ty == 1 { json!(sv) } else { json!(iv) });
            }
            K::Msg(s) => {
                m.insert(name, decode_msg(d, s)?);
            }
            K::MapStr | K::MapBytes | K::MapQuantity => {
                let (k, val) = map_entry(d)?;
                let val = match kind {
                    K::MapStr => json!(str_of(val)?),
                    K::MapBytes => json!(base64::engine::general_purpose::STANDARD.encode(val)),
                    _ => {
                        let q = decode_msg(val, &[(1, "q", K::Str)])?;
                        q["q"].clone()
                    }
                };
                let e = m.entry(name).or_insert_with(|| json!({}));
                e[k] = val;
            }
            K::RepStr => {
                let e = m.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(json!(str_of(d)?));
                }
            }
            K::RepMsg(s) => {
                let item = decode_msg(d, s)?;
                let e = m.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(item);
                }
            }
        }
    }
    Ok(Value::Object(m))
}

/// Decodes a `k8s\0`-prefixed runtime.Unknown envelope into a JSON object.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("protobuf body without the k8s envelope")?;
    let mut r = Rd { b: rest, i: 0 };
    let (mut api_version, mut kind, mut raw): (String, String, &[u8]) =
        (String::new(), String::new(), &[]);
    while !r.done() {
        let (n, _, d) = r.field()?;
        match n {
            1 => {
                let tm = decode_msg(d, &[(1, "apiVersion", K::Str), (2, "kind", K::Str)])?;
                api_version = tm["apiVersion"].as_str().unwrap_or("").to_string();
                kind = tm["kind"].as_str().unwrap_or("").to_string();
            }
            2 => raw = d,
            _ => {}
        }
    }
    let schema = schema_for(&kind).ok_or_else(|| {
        format!("protobuf encoding of {kind} is not supported by holdfast-sim; use JSON")
    })?;
    let mut v = decode_msg(raw, schema)?;
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}
