//! `UrlClients` against a local HTTP/1.1 server: every URL's path is put before the
//! request path, and clients for URLs on one server share its connections; kcp's
//! `Clients` send virtual-workspace URLs the virtual-workspace kubeconfig's
//! credentials.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use holdfast_shared::clients::UrlClients;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Answers every request with its own path and `Authorization` header as JSON;
/// counts accepted connections.
async fn echo_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("").to_string();
                    // Read the headers (requests here have no body).
                    let mut authorization = String::new();
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = h.split_once(':')
                            && name.eq_ignore_ascii_case("authorization")
                        {
                            authorization = value.trim().to_string();
                        }
                    }
                    let body = serde_json::json!({ "path": path, "authorization": authorization })
                        .to_string();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if w.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, accepted)
}

async fn path_seen(clients: &UrlClients, url: &str, request: &str) -> String {
    let client = clients.at(url).expect("client");
    let req = http::Request::get(request)
        .body(Vec::new())
        .expect("request");
    let v: serde_json::Value = client.request(req).await.expect("response");
    v["path"].as_str().expect("path").to_string()
}

#[tokio::test]
async fn paths_are_prefixed_and_one_server_keeps_one_connection() {
    let (url, accepted) = echo_server().await;
    let config = kube::Config::new(url.parse().expect("url"));
    let clients = UrlClients::new(config, 16);

    assert_eq!(
        path_seen(
            &clients,
            &format!("{url}/clusters/root:a"),
            "/api/v1/namespaces?limit=1"
        )
        .await,
        "/clusters/root:a/api/v1/namespaces?limit=1"
    );
    assert_eq!(
        path_seen(
            &clients,
            &format!("{url}/clusters/root:b/"),
            "/apis/x/v1/ys"
        )
        .await,
        "/clusters/root:b/apis/x/v1/ys"
    );
    assert_eq!(
        path_seen(
            &clients,
            &format!("{url}/services/apiexport/c/e/clusters/*"),
            "/apis/x/v1/ys"
        )
        .await,
        "/services/apiexport/c/e/clusters/*/apis/x/v1/ys"
    );
    assert_eq!(path_seen(&clients, &url, "/version").await, "/version");
    // Sequential requests through four URLs on one server: one connection.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(clients.cached_exactly(), 4);

    // A second server gets its own connection.
    let (other, other_accepted) = echo_server().await;
    assert_eq!(
        path_seen(&clients, &format!("{other}/clusters/root:z"), "/api").await,
        "/clusters/root:z/api"
    );
    assert_eq!(other_accepted.load(Ordering::SeqCst), 1);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bad_urls_are_errors() {
    let clients = UrlClients::new(
        kube::Config::new("http://127.0.0.1:1".parse().expect("url")),
        4,
    );
    for bad in ["/clusters/x", "no scheme", "http://h/x?q=1"] {
        let err = clients
            .at(bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("bad API server URL"), "{bad}: {err}");
    }
}

/// What the echo server saw for one GET of `request` through `client`.
async fn seen(client: kube::Client, request: &str) -> serde_json::Value {
    let req = http::Request::get(request)
        .body(Vec::new())
        .expect("request");
    client.request(req).await.expect("response")
}

fn with_token(url: &str, token: &str, ca: Option<Vec<u8>>) -> kube::Config {
    let mut c = kube::Config::new(url.parse().expect("url"));
    c.auth_info.token = Some(token.to_string().into());
    c.root_cert = ca.map(|der| vec![der]);
    c
}

#[tokio::test]
async fn virtual_workspace_urls_take_the_virtual_workspace_kubeconfig() {
    let (front_proxy, _) = echo_server().await;
    let (vw, _) = echo_server().await;
    let base = with_token(
        &format!("{front_proxy}/clusters/root:holdfast"),
        "front",
        None,
    );
    // Its server is never used: the slice's URLs name theirs.
    let vw_config = with_token("https://unused.example:1", "virtual", None);
    let slice_url = format!("{vw}/services/apiexport/lc1/holdfast.dev/clusters/*");

    let plain = holdfast_shared::kcp::Clients::new(base.clone(), 8);
    let split = holdfast_shared::kcp::Clients::new(base.clone(), 8)
        .with_virtual_workspace_config(Some(vw_config));

    // Without the separate kubeconfig, virtual workspaces get the front-proxy's.
    let v = seen(plain.virtual_workspace(&slice_url).expect("client"), "/api").await;
    assert_eq!(v["authorization"], "Bearer front");
    assert_eq!(
        v["path"],
        "/services/apiexport/lc1/holdfast.dev/clusters/*/api"
    );
    assert_eq!(plain.virtual_workspace_clients().config().root_cert, None);

    // With it: its token (and CA) for virtual-workspace URLs only.
    let v = seen(split.virtual_workspace(&slice_url).expect("client"), "/api").await;
    assert_eq!(v["authorization"], "Bearer virtual");
    let v = seen(split.cluster("root:org").expect("client"), "/api").await;
    assert_eq!(v["authorization"], "Bearer front");
    assert_eq!(v["path"], "/clusters/root:org/api");

    // The CA goes with it (configuration only: no TLS server here).
    let with_ca = holdfast_shared::kcp::Clients::new(base, 8).with_virtual_workspace_config(Some(
        with_token("https://unused.example:1", "virtual", Some(vec![1, 2, 3])),
    ));
    let cfg = with_ca.virtual_workspace_clients().config();
    assert_eq!(cfg.root_cert, Some(vec![vec![1, 2, 3]]));
    assert_eq!(cfg.cluster_url.to_string(), "https://unused.example:1/");
    assert_eq!(with_ca.urls().config().root_cert, None);
}
