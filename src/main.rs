//! The `retrysim` command: a thin client of the library's CLI.

fn main() -> std::process::ExitCode {
    retrysim::cli::main(std::env::args_os())
}
