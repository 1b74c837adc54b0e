//! The `trellis` binary: parses the command line and maps the outcome to an
//! exit code (0 success, 1 a plugin or view failed, 2 usage or bad input).

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = trellis::cli::Cli::from_command_line();
    // `trellis views ... | head` must end quietly, as other Unix tools do,
    // not panic in println! when the pipe closes. A server must not: a
    // client that hangs up mid-response would kill it.
    if !cli.serves() {
        // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    cli.init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(cli.run()) {
        Ok(status) => status.into(),
        Err(error) => {
            // One line: the error and its causes, outermost first.
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
