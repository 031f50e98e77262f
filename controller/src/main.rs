//! `holdfast-controller` binary: see the library crate for the commands.

fn main() -> std::process::ExitCode {
    holdfast_controller::cli::main()
}
