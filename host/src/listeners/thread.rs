//! The threads listeners and the log retention run on: one each, with a
//! runtime of its own, at the lowest CPU priority.

use super::Error;

/// Runs `task` on a thread of its own, with a runtime of its own, at the
/// lowest CPU priority.
pub(super) fn spawn_thread(
    name: &str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, Error> {
    let thread_name = name.to_string();
    std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            lower_priority();
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(task),
                Err(e) => tracing::error!("{thread_name} cannot run: {e}"),
            }
        })
        .map_err(|e| Error::Thread(e.to_string()))
}

/// Listeners run at the lowest CPU priority (nice 19, per thread on
/// Linux): on a busy machine they get little CPU and fall behind instead of
/// slowing scheduling. Their deadline counts the CPU time they use, so
/// waiting for a CPU fails none of them; yet they still get some CPU and
/// so catch up, which SCHED_IDLE would not promise (and a listener starved
/// outright would reach its wall-clock ceiling). Elsewhere, or if refused,
/// they run as usual.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on this thread's id changes only its nice value.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, thread, 19) != 0 {
            tracing::debug!("listeners keep the normal CPU priority: {}", std::io::Error::last_os_error());
        }
    }
}
