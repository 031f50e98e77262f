//! The kcp reconciler's life: its watches started, its passes run, its
//! configurations removed on shutdown when asked.

use super::*;

impl Reconciler {
    /// Starts the watches through every endpoint of the APIExportEndpointSlice of
    /// the holdfast APIExport in `home`'s workspace (the holdfast workspace).
    pub fn new(
        clients: Clients,
        home: Client,
        settings: Settings,
        options: watch::Receiver<InstallOptions>,
        ready: Arc<AtomicBool>,
    ) -> anyhow::Result<Self> {
        let notify = Arc::new(Notify::new());
        fn source<K>(
            home: &Client,
            export: &str,
            clients: &Clients,
            api: Box<dyn Fn(Client) -> Api<K> + Send>,
            config: watcher::Config,
        ) -> Source<K> {
            Source {
                home: home.clone(),
                slice: export.to_string(),
                clients: clients.clone(),
                api,
                config,
            }
        }
        let rules = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                Box::new(|c| {
                    Api::<DynamicObject>::all_with(c, &ApiResource::erase::<DependencyRule>(&()))
                }),
                watcher::Config::default(),
            ),
            notify.clone(),
        );
        let hooks = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                Box::new(Api::<ValidatingWebhookConfiguration>::all),
                watcher::Config::default()
                    .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            ),
            notify.clone(),
        );
        let untyped = |ar: ApiResource| -> Box<dyn Fn(Client) -> Api<DynamicObject> + Send> {
            Box::new(move |c| Api::<DynamicObject>::all_with(c, &ar))
        };
        let bindings = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                untyped(holdfast_shared::kcp::api_binding_resource()),
                watcher::Config::default(),
            ),
            notify.clone(),
        );
        let kinds = PerKind::from_fn(|kind| {
            spawn_store(
                source(
                    &home,
                    &settings.api_export,
                    &clients,
                    untyped(kind.api_resource()),
                    watcher::Config::default(),
                ),
                notify.clone(),
            )
        });
        // holdfast's own configuration in its workspace (kcp calls it for DELETEs of
        // the types bound from holdfast.dev: a CriticalService guarding itself).
        let wake = notify.clone();
        let (home_hooks, home_task) = holdfast_shared::watch::spawn_cache(
            Api::<ValidatingWebhookConfiguration>::all(home.clone()),
            // Only holdfast's own (a foreign one of the name is not deleted).
            watcher::Config::default()
                .fields(&format!("metadata.name={WEBHOOK_CONFIGURATION_NAME}"))
                .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            holdfast_shared::watch::NotFound::Unknown,
            move || wake.notify_one(),
        );
        let mut tasks = vec![rules.task, hooks.task, bindings.task, home_task];
        let workspaces = match settings.tenancy_workspace.as_deref() {
            Some(path) => {
                let wake = notify.clone();
                let (w, task) = crate::kcp::workspaces::WorkspacesConfiguration::new(
                    path,
                    clients.cluster(path)?,
                    move || wake.notify_one(),
                );
                tasks.push(task);
                Some(w)
            }
            None => None,
        };
        let kinds = kinds.into_map(|_, k| {
            tasks.push(k.task);
            k.store
        });
        let answers = Arc::new(ExportAnswers::new(
            &clients,
            settings.resync,
            notify.clone(),
        ));
        tasks.push(tokio::spawn(answers.clone().run()));
        Ok(Self {
            home,
            home_hooks,
            home_warned: AtomicBool::new(false),
            workspaces,
            clients,
            settings,
            options,
            rules: rules.store,
            hooks: hooks.store,
            rule_endpoints: rules.endpoints,
            hook_endpoints: hooks.endpoints,
            bindings: bindings.store,
            binding_endpoints: bindings.endpoints,
            kinds,
            tasks,
            answers,
            last_resync: std::time::Instant::now(),
            notify,
            memo: Memo::new(),
            enforcement: Default::default(),
            unresolved: false,
            resynced: AtomicBool::new(false),
            ready,
        })
    }

    /// Runs until `shutdown`, counting passes in `metrics`; with `cleanup`,
    /// deletes every installed configuration on the way out.
    pub async fn run(
        mut self,
        shutdown: tokio_util::sync::CancellationToken,
        cleanup: bool,
        metrics: crate::reconcile::Metrics,
    ) -> anyhow::Result<()> {
        // Wait for both initial lists.
        while !self.synced() {
            tokio::select! {
                () = self.notify.notified() => {}
                () = tokio::time::sleep(SYNC_POLL) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
        tracing::info!(endpoints = ?self.rule_endpoints.urls(), "kcp caches synced; reconciling");
        let ready = self.ready.clone();
        crate::reconcile::run(&mut self, &metrics, &ready, shutdown).await;
        if cleanup {
            self.cleanup().await;
        }
        Ok(())
    }

    /// Deletes every installed configuration (cleanup on shutdown).
    pub(super) async fn cleanup(&self) {
        let live: Vec<String> = self
            .hooks
            .lock()
            .objects
            .keys()
            .map(|k| k.0.clone())
            .collect();
        for cluster in live {
            match self.delete_in(&cluster).await {
                Ok(()) => tracing::info!(
                    cluster,
                    "cleanup on shutdown: deleted ValidatingWebhookConfiguration holdfast"
                ),
                Err(e) => {
                    tracing::error!(cluster, error = %format!("{e:#}"), "cleanup on shutdown failed")
                }
            }
        }
        if let Some(w) = &self.workspaces {
            w.remove().await;
        }
        // The watch sees holdfast's own only.
        if !self.home_hooks.state().is_empty() {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(self.home.clone());
            match ignore_not_found(
                api.delete(WEBHOOK_CONFIGURATION_NAME, &Default::default())
                    .await,
            ) {
                Ok(()) => tracing::info!(
                    "cleanup on shutdown: deleted ValidatingWebhookConfiguration holdfast in the holdfast workspace"
                ),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "cleanup on shutdown failed in the holdfast workspace")
                }
            }
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
