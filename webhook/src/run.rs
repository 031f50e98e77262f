//! `run`: the webhook's process from flags to a graceful stop.

use crate::{Args, admission, metrics, server, settings, tls, view};
use anyhow::Context;
use holdfast_shared::{
    policy::PolicyConfig,
    runtime::{Shutdown, admin::Admin, http},
};
use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};
use tokio::net::TcpListener;

/// Runs the webhook until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    // Before any watch or review: what `kcp.io/cluster` means follows the topology.
    holdfast_shared::topology::set_process_topology(args.topology)?;
    args.protection
        .check()
        .map_err(holdfast_shared::runtime::ConfigError::new)?;
    let policy = PolicyConfig {
        labels: args.protection.labels(),
        strict: args.protection.strict,
        max_break_glass: args.max_break_glass(),
        kcp: args.topology == holdfast_shared::topology::Topology::Kcp,
    };
    let metrics = metrics::Metrics::new().context("registering metrics")?;
    let certs = tls::CertStore::load(&args.tls_cert, &args.tls_key)
        .context("loading the serving certificate")?;
    let tls_config = certs
        .server_config(args.client_ca_file.as_deref())
        .context("building the TLS configuration")?;
    // The settings shared with the controller (Kubernetes and Karmada): refuse to
    // run with different ones.
    let settings = match args.topology {
        holdfast_shared::topology::Topology::Kcp => None,
        _ => {
            settings::SettingsCheck::new(
                args.kubeconfig.as_deref(),
                policy.labels.clone(),
                args.protection.strict,
            )
            .await
        }
    };
    if let Some(check) = &settings {
        check.check().await?;
    }

    let view = view::WebhookView::new(
        view::ViewOptions {
            virtual_workspace_kubeconfig: args.kcp.virtual_workspace_kubeconfig.as_deref(),
            topology: args.topology,
            kubeconfig: args.kubeconfig.as_deref(),
            label_only: args.label_only,
            mode: args.dependents,
            label_keys: policy.labels.iter().map(|l| l.key.clone()).collect(),
            apiexport: args.kcp.api_export.clone(),
            cascading_keys: policy
                .labels
                .iter()
                .filter(|l| l.protects(holdfast_shared::names::CASCADING_VALUE))
                .map(|l| l.key.clone())
                .collect(),
        },
        metrics.clone(),
    )
    .await;
    let app = Arc::new(server::App::new(
        admission::Admission::new(
            policy.clone(),
            view.clone(),
            metrics.clone(),
            Duration::from_secs(args.event_window_seconds),
        ),
        metrics.clone(),
        args.limits(),
    ));

    let shutdown = Shutdown::new();
    let stop_rx = shutdown.token();
    view.start(stop_rx.clone());
    let probe_listener = TcpListener::bind(args.probe_listen)
        .await
        .with_context(|| format!("binding the probe listener {}", args.probe_listen))?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding the admission listener {}", args.listen))?;
    let grace = Duration::from_secs(args.shutdown_grace_seconds);

    let reload_metrics = metrics.clone();
    let reloader = tokio::spawn(certs.clone().watch(
        Duration::from_millis(args.tls_reload_interval_ms),
        stop_rx.clone(),
        move |outcome| match outcome {
            Ok(_) => {
                reload_metrics.tls_reloads.with_label_values(&["ok"]).inc();
                tracing::info!("serving certificate reloaded");
            }
            Err(e) => {
                reload_metrics.tls_reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, "new serving certificate rejected; keeping the previous one");
            }
        },
    ));
    let probes = tokio::spawn(http::serve(
        probe_listener,
        None,
        Admin::new(server::AppProbes(app.clone()), app.limits.clone()),
        stop_rx.clone(),
        grace,
    ));
    let admission = tokio::spawn(http::serve(
        listener,
        Some(tokio_rustls::TlsAcceptor::from(tls_config)),
        Arc::new(server::AdmissionListener(app.clone())),
        stop_rx.clone(),
        grace,
    ));
    app.serving.store(true, Ordering::Release);
    tracing::info!(
        listen = %args.listen,
        probe_listen = %args.probe_listen,
        topology = %args.topology,
        strict = args.protection.strict,
        labels = %policy.labels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(" "),
        "holdfast-webhook serving"
    );

    let settings_watch = {
        let stop = stop_rx.clone();
        let every = Duration::from_millis(args.settings_check_interval_ms);
        async move {
            match settings {
                Some(check) => check.watch(every, stop).await,
                None => std::future::pending().await,
            }
        }
    };
    let disagreement = tokio::select! {
        () = holdfast_shared::runtime::shutdown::signal() => None,
        r = settings_watch => r.err(),
    };
    if let Some(e) = &disagreement {
        tracing::error!(error = %e, "refusing to serve: draining and stopping");
    }
    tracing::info!("shutting down: draining in-flight reviews");
    app.serving.store(false, Ordering::Release);
    shutdown.trigger();
    let _ = admission.await;
    let _ = probes.await;
    let _ = reloader.await;
    tracing::info!("stopped");
    match disagreement {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
