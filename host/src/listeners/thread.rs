//! The threads listeners and the log retention run on: one each, with a
//! runtime of its own, at the lowest CPU priority while scheduling may
//! need the CPU, at the caller's priority for the drain at a command's end.

use super::Error;

/// The CPU priority of a listener's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Priority {
    /// Nice 19: while scheduling runs.
    Lowest,
    /// The priority of the thread that spawns it (a new thread inherits
    /// it): for catching up once scheduling is done.
    Caller,
}

/// Runs `task` on a thread of its own, with a runtime of its own, at
/// `priority`.
pub(super) fn spawn_thread(
    name: &str,
    priority: Priority,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, Error> {
    let thread_name = name.to_string();
    std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            if priority == Priority::Lowest {
                lower_priority();
            }
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(task),
                Err(e) => tracing::error!("{thread_name} cannot run: {e}"),
            }
        })
        .map_err(|e| Error::Thread(e.to_string()))
}

/// While scheduling runs, listeners run at the lowest CPU priority (nice
/// 19, per thread on Linux): on a busy machine they get little CPU and fall
/// behind instead of slowing scheduling. Their deadline counts the CPU time
/// they use, so waiting for a CPU fails none of them; and SCHED_IDLE would
/// not promise them any CPU at all. Nice 19 cannot be undone without
/// privileges, which is why the drain at a command's end moves each
/// listener to a new thread at the caller's priority rather than renicing
/// this one. Elsewhere, or if refused, they run as usual.
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
