//! The process's TLS: which crypto provider rustls uses, installed once.
//!
//! reqwest is built with rustls but no provider of its own (so that no
//! second crypto stack is compiled in). The provider is process-wide, so
//! every reqwest client in the process needs [`install_crypto_provider`]
//! called before it is built: the object store's, the CLI's remote
//! commands', the tests'. The tidy test keeps client builders to the
//! files that do.

/// Installs ring as rustls's process-wide crypto provider, once.
pub fn install_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Another provider installed first (by an embedding program) serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
