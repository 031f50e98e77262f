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

/// A field table: `NUMBER "jsonName" Kind` per field, in protobuf field-number order.
macro_rules! fields {
    ($($n:literal $name:literal $k:ident $(($of:ident))?),* $(,)?) => {
        &[$(($n, $name, K::$k $(($of))?)),*]
    };
}

const TIME_FIELDS: &[F] = &[];
const OWNER_REF: &[F] = fields![
    1 "kind" Str, 3 "name" Str, 4 "uid" Str, 5 "apiVersion" Str, 6 "controller" BoolP,
    7 "blockOwnerDeletion" BoolP,
];
const OBJECT_META: &[F] = fields![
    1 "name" Str, 2 "generateName" Str, 3 "namespace" Str, 5 "uid" Str, 6 "resourceVersion" Str,
    7 "generation" Int, 8 "creationTimestamp" Time, 9 "deletionTimestamp" Time,
    10 "deletionGracePeriodSeconds" IntP, 11 "labels" MapStr, 12 "annotations" MapStr,
    13 "ownerReferences" RepMsg(OWNER_REF), 14 "finalizers" RepStr,
];
const LS_REQ: &[F] = fields![1 "key" Str, 2 "operator" Str, 3 "values" RepStr];
const LABEL_SELECTOR: &[F] = fields![1 "matchLabels" MapStr, 2 "matchExpressions" RepMsg(LS_REQ)];
const NS_SPEC: &[F] = fields![1 "finalizers" RepStr];
const NS_STATUS: &[F] = fields![1 "phase" Str];
const NAMESPACE: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(NS_SPEC), 3 "status" Msg(NS_STATUS),
];
const CONFIGMAP: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "data" MapStr, 3 "binaryData" MapBytes, 4 "immutable" BoolP,
];
const SECRET: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "data" MapBytes, 3 "type" Str, 4 "stringData" MapStr,
    5 "immutable" BoolP,
];
const OBJECT_REF: &[F] = fields![
    1 "kind" Str, 2 "namespace" Str, 3 "name" Str, 4 "uid" Str, 5 "apiVersion" Str,
    6 "resourceVersion" Str, 7 "fieldPath" Str,
];
const LOCAL_REF: &[F] = fields![1 "name" Str];
const SERVICE_ACCOUNT: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "secrets" RepMsg(OBJECT_REF),
    3 "imagePullSecrets" RepMsg(LOCAL_REF), 4 "automountServiceAccountToken" BoolP,
];
const SERVICE_PORT: &[F] = fields![
    1 "name" Str, 2 "protocol" Str, 3 "port" Int, 4 "targetPort" IntOrStr, 5 "nodePort" Int,
    6 "appProtocol" Str,
];
const SERVICE_SPEC: &[F] = fields![
    1 "ports" RepMsg(SERVICE_PORT), 2 "selector" MapStr, 3 "clusterIP" Str, 4 "type" Str,
    5 "externalIPs" RepStr, 7 "sessionAffinity" Str, 11 "externalName" Str,
];
const SERVICE: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(SERVICE_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const CONTAINER_PORT: &[F] = fields![
    1 "name" Str, 2 "hostPort" Int, 3 "containerPort" Int, 4 "protocol" Str, 5 "hostIP" Str,
];
const ENV_VAR: &[F] = fields![1 "name" Str, 2 "value" Str];
const RESOURCES: &[F] = fields![1 "limits" MapQuantity, 2 "requests" MapQuantity];
const CONTAINER: &[F] = fields![
    1 "name" Str, 2 "image" Str, 3 "command" RepStr, 4 "args" RepStr, 5 "workingDir" Str,
    6 "ports" RepMsg(CONTAINER_PORT), 7 "env" RepMsg(ENV_VAR), 8 "resources" Msg(RESOURCES),
    13 "terminationMessagePath" Str, 14 "imagePullPolicy" Str, 16 "stdin" Bool, 17 "stdinOnce" Bool,
    18 "tty" Bool, 20 "terminationMessagePolicy" Str,
];
const POD_SPEC: &[F] = fields![
    2 "containers" RepMsg(CONTAINER), 3 "restartPolicy" Str, 4 "terminationGracePeriodSeconds" IntP,
    6 "dnsPolicy" Str, 7 "nodeSelector" MapStr, 8 "serviceAccountName" Str, 10 "nodeName" Str,
    14 "securityContext" Msg(TIME_FIELDS), 19 "schedulerName" Str,
    20 "initContainers" RepMsg(CONTAINER),
];
const POD_TEMPLATE: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(POD_SPEC)];
const ROLLING: &[F] = fields![1 "maxUnavailable" IntOrStr, 2 "maxSurge" IntOrStr];
const STRATEGY: &[F] = fields![1 "type" Str, 2 "rollingUpdate" Msg(ROLLING)];
const DEPLOY_SPEC: &[F] = fields![
    1 "replicas" IntP, 2 "selector" Msg(LABEL_SELECTOR), 3 "template" Msg(POD_TEMPLATE),
    4 "strategy" Msg(STRATEGY), 5 "minReadySeconds" Int, 6 "revisionHistoryLimit" IntP,
    7 "paused" Bool, 9 "progressDeadlineSeconds" IntP,
];
const DEPLOYMENT: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(DEPLOY_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const POD: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(POD_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const PRECONDITIONS: &[F] = fields![1 "uid" Str, 2 "resourceVersion" Str];
const DELETE_OPTIONS: &[F] = fields![
    1 "gracePeriodSeconds" IntP, 2 "preconditions" Msg(PRECONDITIONS), 3 "orphanDependents" BoolP,
    4 "propagationPolicy" Str, 5 "dryRun" RepStr,
];
// k8s.io/api/rbac/v1 PolicyRule: verbs 1, apiGroups 2, resources 3,
// resourceNames 4, nonResourceURLs 5.
const POLICY_RULE: &[F] = fields![
    1 "verbs" RepStr, 2 "apiGroups" RepStr, 3 "resources" RepStr, 4 "resourceNames" RepStr,
    5 "nonResourceURLs" RepStr,
];
const ROLE: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "rules" RepMsg(POLICY_RULE)];
const SUBJECT: &[F] = fields![1 "kind" Str, 2 "apiGroup" Str, 3 "name" Str, 4 "namespace" Str];
const ROLE_REF: &[F] = fields![1 "apiGroup" Str, 2 "kind" Str, 3 "name" Str];
const ROLE_BINDING: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "subjects" RepMsg(SUBJECT), 3 "roleRef" Msg(ROLE_REF),
];

const RESOURCE_ATTRS: &[F] = fields![
    1 "namespace" Str, 2 "verb" Str, 3 "group" Str, 4 "version" Str, 5 "resource" Str,
    6 "subresource" Str, 7 "name" Str,
];
const NON_RESOURCE_ATTRS: &[F] = fields![1 "path" Str, 2 "verb" Str];
const SAR_SPEC: &[F] = fields![
    1 "resourceAttributes" Msg(RESOURCE_ATTRS), 2 "nonResourceAttributes" Msg(NON_RESOURCE_ATTRS),
    3 "user" Str, 4 "groups" RepStr, 6 "uid" Str,
];
const SELF_SAR_SPEC: &[F] = fields![
    1 "resourceAttributes" Msg(RESOURCE_ATTRS), 2 "nonResourceAttributes" Msg(NON_RESOURCE_ATTRS),
];
const SAR: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(SAR_SPEC)];
const SELF_SAR: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(SELF_SAR_SPEC)];
const SSRR_SPEC: &[F] = fields![1 "namespace" Str];
const SSRR: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(SSRR_SPEC)];
const TOKEN_REVIEW_SPEC: &[F] = fields![1 "token" Str, 2 "audiences" RepStr];
const TOKEN_REVIEW: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(TOKEN_REVIEW_SPEC)];

const JOB_SPEC: &[F] = fields![
    1 "parallelism" IntP, 2 "completions" IntP, 3 "activeDeadlineSeconds" IntP,
    4 "selector" Msg(LABEL_SELECTOR), 5 "manualSelector" BoolP, 6 "template" Msg(POD_TEMPLATE),
    7 "backoffLimit" IntP, 8 "ttlSecondsAfterFinished" IntP, 9 "completionMode" Str,
    10 "suspend" BoolP,
];
const JOB: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(JOB_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const JOB_TEMPLATE: &[F] = fields![1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(JOB_SPEC)];
const CRONJOB_SPEC: &[F] = fields![
    1 "schedule" Str, 2 "startingDeadlineSeconds" IntP, 3 "concurrencyPolicy" Str,
    4 "suspend" BoolP, 5 "jobTemplate" Msg(JOB_TEMPLATE), 6 "successfulJobsHistoryLimit" IntP,
    7 "failedJobsHistoryLimit" IntP, 8 "timeZone" Str,
];
const CRONJOB: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(CRONJOB_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const PRIORITY_CLASS: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "value" IntP, 3 "globalDefault" Bool, 4 "description" Str,
    5 "preemptionPolicy" Str,
];
const QUOTA_SPEC: &[F] = fields![1 "hard" MapQuantity, 2 "scopes" RepStr];
const QUOTA: &[F] = fields![
    1 "metadata" Msg(OBJECT_META), 2 "spec" Msg(QUOTA_SPEC), 3 "status" Msg(TIME_FIELDS),
];
const METADATA_ONLY: &[F] = fields![1 "metadata" Msg(OBJECT_META)];

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
