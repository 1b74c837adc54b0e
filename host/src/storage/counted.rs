//! Requests an object store is sent, counted by kind: what a view costs
//! on the wire (issue 41's "what crosses the wire is bounded"), for the
//! benchmarks and for tests that count work rather than time it.
//!
//! A wrapper around any `ObjectStore`: every call goes through, counted
//! once as it is made. A listing counts the pages S3 answers it in (one
//! per 1,000 objects, at least one); a multipart upload counts its
//! creation, each part and its completion.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// Objects listed per page by S3's ListObjectsV2.
pub const LIST_PAGE: usize = 1000;

/// Requests sent so far, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Requests {
    pub get: u64,
    pub head: u64,
    pub put: u64,
    pub list: u64,
    pub delete: u64,
    pub other: u64,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.list + self.delete + self.other
    }

    /// What was sent between `earlier` and this.
    pub fn since(&self, earlier: &Requests) -> Requests {
        Requests {
            get: self.get - earlier.get,
            head: self.head - earlier.head,
            put: self.put - earlier.put,
            list: self.list - earlier.list,
            delete: self.delete - earlier.delete,
            other: self.other - earlier.other,
        }
    }
}

impl std::fmt::Display for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests ({} GET, {} HEAD, {} PUT, {} LIST, {} DELETE, {} other)",
            self.total(),
            self.get,
            self.head,
            self.put,
            self.list,
            self.delete,
            self.other
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    other: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// An object store whose requests are counted.
#[derive(Debug)]
pub struct Counted {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
}

impl Counted {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Counted {
        Counted { inner, counters: Arc::default() }
    }

    /// A reader of this store's counts, kept after the store is shared.
    pub fn counter(&self) -> RequestCounter {
        RequestCounter(self.counters.clone())
    }
}

/// Reads the counts of a [`Counted`] store.
#[derive(Debug, Clone)]
pub struct RequestCounter(Arc<Counters>);

impl RequestCounter {
    pub fn sent(&self) -> Requests {
        let c = &self.0;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Requests {
            get: load(&c.get),
            head: load(&c.head),
            put: load(&c.put),
            list: load(&c.list),
            delete: load(&c.delete),
            other: load(&c.other),
        }
    }
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.inner)
    }
}

/// A listing's objects, each page of them counted as it is read.
fn counted_pages(
    stream: futures_util::stream::BoxStream<'static, Result<ObjectMeta>>,
    counters: Arc<Counters>,
) -> futures_util::stream::BoxStream<'static, Result<ObjectMeta>> {
    Counters::add(&counters.list, 1);
    stream
        .enumerate()
        .map(move |(index, item)| {
            if index > 0 && index % LIST_PAGE == 0 {
                Counters::add(&counters.list, 1);
            }
            item
        })
        .boxed()
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        Counters::add(&self.counters.put, 1);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        Counters::add(&self.counters.other, 1);
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountedUpload { upload, counters: self.counters.clone() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let counter = if options.head { &self.counters.head } else { &self.counters.get };
        Counters::add(counter, 1);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        Counters::add(&self.counters.get, ranges.len() as u64);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: futures_util::stream::BoxStream<'static, Result<Path>>,
    ) -> futures_util::stream::BoxStream<'static, Result<Path>> {
        // S3 deletes up to 1,000 keys a request; counted per key here, an
        // upper bound that does not depend on how the client batches.
        let counters = self.counters.clone();
        let counted = locations
            .map(move |location| {
                Counters::add(&counters.delete, 1);
                location
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> futures_util::stream::BoxStream<'static, Result<ObjectMeta>> {
        counted_pages(self.inner.list(prefix), self.counters.clone())
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> futures_util::stream::BoxStream<'static, Result<ObjectMeta>> {
        counted_pages(self.inner.list_with_offset(prefix, offset), self.counters.clone())
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        Counters::add(&self.counters.list, 1);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        Counters::add(&self.counters.other, 1);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        Counters::add(&self.counters.other, 2);
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload whose parts and completion are counted.
#[derive(Debug)]
struct CountedUpload {
    upload: Box<dyn MultipartUpload>,
    counters: Arc<Counters>,
}

#[async_trait]
impl MultipartUpload for CountedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        Counters::add(&self.counters.put, 1);
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        Counters::add(&self.counters.other, 1);
        self.upload.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        Counters::add(&self.counters.other, 1);
        self.upload.abort().await
    }
}
