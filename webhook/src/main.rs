//! `holdfast-webhook`: the HTTPS admission server.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = holdfast_webhook::Args::parse();
    holdfast_webhook::init_tracing(&args.log_format);
    holdfast_webhook::run(args).await
}
