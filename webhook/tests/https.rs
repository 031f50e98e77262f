//! The real `holdfast-webhook` binary over HTTPS, with a certificate made here and an
//! API server that cannot be reached: label and strict decisions, bad input, HTTP/1.1
//! and HTTP/2, slow clients, certificate hot reload, probes and metrics.

mod common;

use common::*;
use serde_json::{Value, json};
use std::{
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn label_and_strict_decisions_over_http1_and_http2() {
    let p = pki("webhook");
    let wh = start(&p, &["--strict", "--label-only"]).await;
    for proto in [Proto::H1, Proto::H2] {
        let c = client(&p.ca_pem, proto);
        let expected_version = match proto {
            Proto::H1 => http::Version::HTTP_11,
            Proto::H2 => http::Version::HTTP_2,
        };

        // Labeled Namespace DELETE: denied with the contract's shape.
        let body = ns_review(
            "u-1",
            "DELETE",
            Value::Null,
            ns("prod", json!({"holdfast.dev/protected": "Always"})),
        );
        let reply = send(&c, wh.port, "POST", "/validate?timeout=10s", body).await;
        assert_eq!(reply.version, expected_version, "{proto:?}");
        let r = verdict(&reply);
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 403);
        assert_eq!(r["status"]["reason"], "Forbidden");
        let msg = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with(
                "holdfast: Namespace prod is protected by label holdfast.dev/protected=Always"
            ),
            "{msg}"
        );
        assert!(msg.contains("kubectl label"), "{msg}");

        // Unlabeled Namespace DELETE: allowed.
        let body = ns_review("u-2", "DELETE", Value::Null, ns("dev", json!({})));
        let r = verdict(&send(&c, wh.port, "POST", "/validate?timeout=10s", body).await);
        assert_eq!(r["uid"], "u-2");
        assert_eq!(r["allowed"], true);
        assert!(r.get("status").is_none());

        // Strict: an UPDATE removing the label is denied.
        let old = ns("prod", json!({"holdfast.dev/protected": "Always"}));
        let body = ns_review("u-3", "UPDATE", ns("prod", json!({})), old.clone());
        let r = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
        assert_eq!(r["allowed"], false);
        assert!(message(&r).contains("strict mode"), "{r}");

        // Adding the exemption in the same update is not enough.
        let exempt = || ns("prod", json!({"holdfast.dev/strict-exempt": "true"}));
        let body = ns_review("u-4", "UPDATE", exempt(), old);
        let r = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
        assert_eq!(r["allowed"], false);

        // With the exemption already stored, the removal passes.
        let old = ns(
            "prod",
            json!({"holdfast.dev/protected": "Always", "holdfast.dev/strict-exempt": "true"}),
        );
        let body = ns_review("u-5", "UPDATE", exempt(), old);
        let r = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
        assert_eq!(r["uid"], "u-5");
        assert_eq!(r["allowed"], true);
    }

    // Metrics count what happened.
    let (status, metrics) = probe(wh.probe_port, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"holdfast_webhook_admission_requests_total{decider="label",decision="deny",operation="DELETE"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"decider="strict""#), "{metrics}");
    assert!(
        metrics.contains("holdfast_webhook_admission_duration_seconds_bucket"),
        "{metrics}"
    );
}

#[tokio::test]
async fn bad_input_gets_clear_answers() {
    let p = pki("webhook");
    let wh = start(&p, &["--label-only"]).await;
    for proto in [Proto::H1, Proto::H2] {
        let c = client(&p.ca_pem, proto);
        let r = send(&c, wh.port, "POST", "/validate", "this is not json").await;
        assert_eq!(r.status, 400);
        let text = String::from_utf8_lossy(&r.body).to_string();
        assert!(text.contains("not valid JSON"), "{text}");
        assert_eq!(text.trim_end().lines().count(), 1, "one line: {text}");

        let r = send(
            &c,
            wh.port,
            "POST",
            "/validate",
            r#"{"apiVersion":"v1","kind":"Pod"}"#,
        )
        .await;
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).contains("AdmissionReview"));

        let r = send(&c, wh.port, "POST", "/validate",
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#).await;
        assert_eq!(r.status, 400);

        if matches!(proto, Proto::H2) {
            let huge = vec![b' '; 3 * 1024 * 1024 + 1];
            let r = send(&c, wh.port, "POST", "/validate", huge).await;
            assert_eq!(r.status, 413);
        }

        let r = send(&c, wh.port, "GET", "/validate", "").await;
        assert_eq!(r.status, 405);

        let r = send(&c, wh.port, "POST", "/mutate", "{}").await;
        assert_eq!(r.status, 404);

        // An object without usable metadata is denied, never silently allowed.
        let body = ns_review(
            "u-9",
            "DELETE",
            Value::Null,
            json!({"metadata": {"name": "x", "labels": ["not", "a", "map"]}}),
        );
        let v = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
        assert_eq!(v["allowed"], false);
        assert!(message(&v).starts_with("holdfast: cannot evaluate"), "{v}");
    }
    // Over HTTP/1.1 the 413 comes before the body is read, so the client may see the
    // connection close while still writing: read the answer off the raw stream.
    for chunked in [false, true] {
        let mut s = tls_stream(&p.ca_pem, wh.port).await;
        let head = if chunked {
            "POST /validate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                .to_string()
        } else {
            format!(
                "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
                3 * 1024 * 1024 + 1
            )
        };
        s.write_all(head.as_bytes()).await.expect("headers");
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..60 {
            let written = if chunked {
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                s.write_all(&framed).await
            } else {
                s.write_all(&chunk).await
            };
            if written.is_err() {
                break;
            }
        }
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(
            text.starts_with("HTTP/1.1 413"),
            "chunked={chunked}: {text}"
        );
    }

    // The server survived all of it.
    assert_eq!(
        probe(wh.probe_port, "/healthz").await.expect("healthz").0,
        200
    );
}

/// Sends the start of a request, never the rest, and reads (for at most 15 s)
/// what the webhook answers until it closes: whether it closed in time, and
/// what it sent.
async fn partial(p: &Pki, port: u16, start: &[u8]) -> (bool, Vec<u8>) {
    let mut s = tls_stream(&p.ca_pem, port).await;
    s.write_all(start).await.expect("partial request");
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut buf)).await;
    (closed.is_ok(), buf)
}

#[tokio::test]
async fn slow_clients_are_cut_off() {
    let p = pki("webhook");
    let wh = start(&p, &[]).await;

    // Headers that never finish: the connection is closed after the read timeout.
    let (closed, _) = partial(
        &p,
        wh.port,
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\n",
    )
    .await;
    assert!(closed, "connection with unfinished headers was held open");

    // A body that never arrives: 408.
    let (_, buf) = partial(&p, wh.port, b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"").await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
}

#[tokio::test]
async fn probes_and_readiness_with_api_server_down() {
    let p = pki("webhook");
    // Label-only: nothing to load, ready once serving even with no API server.
    let wh = start(&p, &["--label-only"]).await;
    assert_eq!(
        probe(wh.probe_port, "/healthz").await.expect("healthz").0,
        200
    );
    let (status, body) = probe(wh.probe_port, "/readyz").await.expect("readyz");
    assert_eq!(status, 200, "{body}");
    assert_eq!(probe(wh.probe_port, "/nope").await.expect("404").0, 404);
    drop(wh);

    // With policy objects to load and the API server unreachable: alive, not ready;
    // label decisions still work; anything else a policy could govern is refused
    // with "retry later" rather than allowed.
    let wh = start(&p, &[]).await;
    assert_eq!(
        probe(wh.probe_port, "/healthz").await.expect("healthz").0,
        200
    );
    let (status, body) = probe(wh.probe_port, "/readyz").await.expect("readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("policy registry not loaded"), "{body}");
    let c = client(&p.ca_pem, Proto::H1);
    let body = ns_review(
        "u-a",
        "DELETE",
        Value::Null,
        ns("prod", json!({"holdfast.dev/protected": "true"})),
    );
    let r = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
    assert!(message(&r).contains("protected by label"), "{r}");
    let body = ns_review("u-b", "DELETE", Value::Null, ns("dev", json!({})));
    let r = verdict(&send(&c, wh.port, "POST", "/validate", body).await);
    assert_eq!(r["allowed"], false);
    assert!(
        message(&r).starts_with("holdfast: not ready yet, retry later"),
        "{r}"
    );
    let (_, metrics) = probe(wh.probe_port, "/metrics").await.expect("metrics");
    assert!(metrics.contains("holdfast_webhook_ready 0"), "{metrics}");
}

#[tokio::test]
async fn certificate_is_reloaded_without_restart() {
    let first = pki("first");
    let wh = start(&first, &["--label-only"]).await;
    let body = ns_review("u-r", "DELETE", Value::Null, ns("a", json!({})));
    let r = validate(&first.ca_pem, Proto::H1, wh.port, body.clone()).await;
    assert_eq!(r["allowed"], true);

    // A broken pair is ignored: the old certificate keeps serving (once the webhook
    // has tried, and failed, to load it).
    std::fs::write(wh.dir.path().join("tls.crt"), "garbage").expect("write");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = probe(wh.probe_port, "/metrics").await.expect("metrics");
        if metrics.contains(r#"holdfast_webhook_tls_reloads_total{result="error"}"#) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broken pair was never tried: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = validate(&first.ca_pem, Proto::H1, wh.port, body.clone()).await;
    assert_eq!(r["allowed"], true);

    // A new pair from another CA is picked up.
    let second = pki("second");
    write_pki(wh.dir.path(), &second);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(&second.ca_pem, &[])));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", wh.port))
            .await
            .expect("connect");
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        if connector.connect(name, tcp).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "new certificate was not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = validate(&second.ca_pem, Proto::H2, wh.port, body).await;
    assert_eq!(r["allowed"], true);
    let (_, metrics) = probe(wh.probe_port, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains("holdfast_webhook_tls_reloads_total{result=\"ok\"} 1\n"),
        "exactly one successful reload: {metrics}"
    );
    assert!(
        metrics.contains(r#"holdfast_webhook_tls_reloads_total{result="error"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn bad_flags_fail_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast-webhook"))
        .args(words("--tls-cert /nonexistent.crt --tls-key /nonexistent.key --listen 127.0.0.1:0 --probe-listen 127.0.0.1:0"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "a runtime error exits 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent.crt"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_holdfast-webhook"))
        .args([
            "--tls-cert",
            "a",
            "--tls-key",
            "b",
            "--protection-label",
            "Bad Key=x",
        ])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad flag is a usage error (exit 2)"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid label key"));
}

#[tokio::test]
async fn sigterm_drains_in_flight_reviews() {
    let p = pki("webhook");
    let mut wh = start(&p, &["--label-only", "--read-timeout-seconds", "60"]).await;
    let body = ns_review(
        "u-drain",
        "DELETE",
        Value::Null,
        ns("prod", json!({"holdfast.dev/protected": "true"})),
    );
    // A review whose body is still arriving when SIGTERM comes: `Expect:
    // 100-continue` makes the server say when the handler is reading the body, so
    // the review is in flight before the signal is sent...
    let mut s = tls_stream(&p.ca_pem, wh.port).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.expect("headers");
    let mut cont = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut cont))
        .await
        .expect("100 Continue within 30 s")
        .expect("read 100 Continue");
    assert_eq!(&cont, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(&body[..10]).await.expect("first bytes");
    let status = Command::new("kill")
        .args(["-TERM", &wh.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // ...and the webhook has begun its shutdown before the rest arrives...
    let log = wh.dir.path().join("webhook.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("shutting down: draining in-flight reviews") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no shutdown after SIGTERM: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...is still answered.
    s.write_all(&body[10..]).await.expect("rest of body");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("\"uid\":\"u-drain\"") && text.contains("\"allowed\":false"),
        "{text}"
    );
    // New connections are refused and the process exits cleanly.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = wh.child.try_wait() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "webhook did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", wh.port))
            .await
            .is_err()
    );
}

/// On kcp every object carries `kcp.io/cluster`; the webhook refuses the DELETE of
/// one without it (its workspace, and so its protections, are unknown) and judges one
/// with it as usual.
#[tokio::test]
async fn on_kcp_a_delete_without_its_logical_cluster_is_refused() {
    let p = pki("webhook");
    let wh = start(&p, &["--topology", "kcp", "--label-only"]).await;
    let delete = |uid: &'static str, obj: Value| {
        validate(
            &p.ca_pem,
            Proto::H1,
            wh.port,
            ns_review(uid, "DELETE", Value::Null, obj),
        )
    };
    let r = delete("u-kcp-1", ns("team", json!({}))).await;
    assert_eq!(
        (r["uid"].as_str(), r["allowed"].as_bool()),
        (Some("u-kcp-1"), Some(false))
    );
    assert_eq!(
        message(&r),
        "holdfast: cannot evaluate DELETE of Namespace team: the object carries no \
         kcp.io/cluster annotation, so its workspace (and every protection that applies \
         there) is unknown; refusing rather than risk removing a protected object. Retry \
         the request; if it keeps failing, check the object with kubectl get -o yaml."
    );
    let mut annotated = ns("team", json!({}));
    annotated["metadata"]["annotations"] = json!({"kcp.io/cluster": "2x8kq9"});
    let r = delete("u-kcp-2", annotated).await;
    assert_eq!(r["allowed"], true, "{r}");
}
