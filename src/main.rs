//! The `retrysim` command: a thin client of the library's CLI.

/// Runs allocate and free many small values (messages, replies, copies of a state to resume
/// from); mimalloc serves them faster than the system's allocator. It is built without
/// transparent huge pages (see `Cargo.toml`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    retrysim::cli::main(std::env::args_os())
}
