//! The object-store view storage (`storage::object`) against a real S3
//! protocol server (moto, see `moto.rs`): a publish read back through its
//! pointer, a republish replacing the version and keeping the old one for
//! the grace period, old versions and crashed uploads' orphans collected
//! after it (time driven by version ids in the past and by the collection's
//! `now`, never by sleeping), the probe of a root,
//! writers racing on one view with exactly one winner and nothing left of
//! the loser, commits of identical bytes telling apart (ABA), external
//! data read as it lies, and what identifies a rewritten empty flag. Each
//! test has buckets of its own and a handful of small files: moto answers
//! in a few milliseconds a request.

use std::io;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use trellis::storage::object::Tally;
use trellis::storage::{Key, ObjectDir, S3Config, Staged, ViewStore, Walk};

use crate::moto::moto;

const ALL: Walk<'static> = Walk { follow_links: true, exact_names: true, keep: &|_| true };

/// A bucket of the test's own, the store over it staging in a temporary
/// directory (kept alive by the first element), and an outside client of it.
fn fixture() -> (tempfile::TempDir, ObjectDir, Arc<dyn ObjectStore>) {
    let moto = moto();
    let bucket = moto.bucket(false);
    let local = tempfile::tempdir().unwrap();
    let dir = moto.dir(&bucket, local.path());
    (local, dir, moto.client(&bucket))
}

fn key(dir: &ObjectDir, relative: &str) -> Key {
    dir.key(&dir.root().join(relative))
}

/// A staged version holding `files` and the done flag, as a transformation
/// and `Staging::publish` leave it.
fn staged(dir: &ObjectDir, files: &[(&str, &str)]) -> Staged {
    let staged = dir.stage().unwrap();
    for (name, content) in files {
        let path = staged.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    staged.touch("_SUCCESS").unwrap();
    staged
}

fn names(dir: &ObjectDir, key: &Key) -> Vec<String> {
    let mut listed: Vec<_> = dir
        .list(key, &ALL)
        .unwrap()
        .into_iter()
        .map(|entry| format!("{}{}", entry.name, if entry.is_dir { "/" } else { "" }))
        .collect();
    listed.sort();
    listed
}

/// What an outside client finds under `prefix` (full keys, sorted).
fn objects(client: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    let prefix = ObjectPath::from(prefix);
    let found: Vec<_> = moto().block_on(client.list(Some(&prefix)).try_collect::<Vec<_>>()).unwrap();
    let mut found: Vec<_> = found.into_iter().map(|meta| meta.location.to_string()).collect();
    found.sort();
    found
}

fn body(client: &Arc<dyn ObjectStore>, location: &str) -> String {
    let got = moto().block_on(async { client.get(&ObjectPath::from(location)).await.unwrap().bytes().await });
    String::from_utf8(got.unwrap().to_vec()).unwrap()
}

#[test]
fn a_publish_is_read_through_its_pointer() {
    let (local, dir, client) = fixture();
    let data = key(&dir, "v/2015/05/01");
    assert!(!dir.holds_data(&data));
    assert!(!dir.exists(&data.join("_SUCCESS")));

    let files = [("part-0", "a,1\n"), ("sub/part-1", "b,2\n"), (".trellis-publish.json", "{}")];
    dir.publish(staged(&dir, &files), &data, "_SUCCESS").unwrap();
    let version = dir.current_version(&data).unwrap().expect("a pointer");
    assert_eq!(names(&dir, &data), [".trellis-publish.json", "_SUCCESS", "part-0", "sub/", "sub/part-1"]);
    assert_eq!(dir.read(&data.join("part-0")).unwrap().as_deref(), Some(&b"a,1\n"[..]));
    assert_eq!(dir.read(&data.join(".trellis-publish.json")).unwrap().as_deref(), Some(&b"{}"[..]));
    assert_eq!(dir.read(&data.join("absent")).unwrap(), None);
    assert!(dir.holds_data(&data));
    // The done flag for outside readers names the version to read.
    let flag = dir.identity(&data.join("_SUCCESS")).expect("the flag");
    assert_eq!(flag.size, version.len() as u64);
    assert_eq!(body(&client, "proj/v/2015/05/01/_SUCCESS"), version);
    assert_eq!(
        objects(&client, "proj/v/2015/05/01"),
        [
            "proj/v/2015/05/01/_CURRENT".to_string(),
            "proj/v/2015/05/01/_SUCCESS".to_string(),
            format!("proj/v/2015/05/01/_v/{version}/.trellis-publish.json"),
            format!("proj/v/2015/05/01/_v/{version}/_SUCCESS"),
            format!("proj/v/2015/05/01/_v/{version}/part-0"),
            format!("proj/v/2015/05/01/_v/{version}/sub/part-1"),
        ]
    );
    assert!(std::fs::read_dir(local.path().join(".trellis-staging")).unwrap().next().is_none(), "staging removed");
}

/// A republish makes the new version current at once, and keeps the one
/// it replaced for the grace period (an outside reader may still be
/// listing it); a collection after the grace removes it, never the current.
#[test]
fn a_republish_keeps_the_old_version_for_the_grace_and_gc_removes_it_after() {
    let (_local, dir, client) = fixture();
    let data = key(&dir, "v/1");
    dir.publish(staged(&dir, &[("part", "first"), ("only-in-first", "x")]), &data, "_SUCCESS").unwrap();
    let first = dir.current_version(&data).unwrap().unwrap();
    dir.publish(staged(&dir, &[("part", "second")]), &data, "_SUCCESS").unwrap();
    let second = dir.current_version(&data).unwrap().unwrap();
    assert_ne!(first, second);
    assert_eq!(names(&dir, &data), ["_SUCCESS", "part"]);
    assert_eq!(dir.read(&data.join("part")).unwrap().as_deref(), Some(&b"second"[..]));
    assert_eq!(dir.read(&data.join("only-in-first")).unwrap(), None);
    assert_eq!(body(&client, "proj/v/1/_SUCCESS"), second);
    let first_objects = objects(&client, &format!("proj/v/1/_v/{first}"));
    assert_eq!(first_objects.len(), 3, "the replaced version is kept: {first_objects:?}");

    let grace = Duration::from_secs(3600);
    let now = SystemTime::now();
    // Within the grace: nothing is removable.
    let within = dir.collect_at(now + Duration::from_secs(30 * 60), grace, false).unwrap();
    assert_eq!(within.totals().0, Tally::default(), "{within:?}");
    assert_eq!(within.totals().1.versions, 2);
    // After it, a dry run says what would go and removes nothing.
    let later = now + Duration::from_secs(2 * 3600);
    let dry = dir.collect_at(later, grace, true).unwrap();
    assert_eq!(dry.totals().0, Tally { versions: 1, objects: 3, bytes: 6 }, "{dry:?}");
    assert_eq!(objects(&client, &format!("proj/v/1/_v/{first}")), first_objects);
    let collected = dir.collect_at(later, grace, false).unwrap();
    assert_eq!(collected.views.len(), 1);
    let view = &collected.views[0];
    assert_eq!((view.key.as_str(), view.current.as_deref()), ("v/1", Some(second.as_str())));
    assert_eq!(view.removed, Tally { versions: 1, objects: 3, bytes: 6 });
    assert_eq!(view.kept, Tally { versions: 1, objects: 2, bytes: 6 });
    assert_eq!(objects(&client, &format!("proj/v/1/_v/{first}")), Vec::<String>::new(), "removed after the grace");
    // The current version is never removable, however late and short the grace.
    let decade = now + Duration::from_secs(10 * 365 * 24 * 3600);
    assert_eq!(dir.collect_at(decade, Duration::ZERO, false).unwrap().totals().0, Tally::default());
    assert_eq!(dir.read(&data.join("part")).unwrap().as_deref(), Some(&b"second"[..]));
}

/// A version id as a publish at `millis` would have made it.
fn version_at(millis: u128, n: u64) -> String {
    format!("{millis:013}-{n:016x}")
}

fn millis_ago(ago: Duration) -> u128 {
    (SystemTime::now() - ago).duration_since(UNIX_EPOCH).unwrap().as_millis()
}

fn put(client: &Arc<dyn ObjectStore>, location: &str, content: &str) {
    moto().block_on(client.put(&ObjectPath::from(location), content.to_string().into())).unwrap();
}

/// Versions written long ago by publishes of their own (ids in the past),
/// as an outside client can lay them out: a crashed upload's orphan older
/// than the grace goes, one younger (an upload that may be in progress)
/// stays; the version replaced just now stays for the grace, even though a
/// crashed upload's orphan sits between it and the new one in id order.
#[test]
fn orphans_are_collected_after_the_grace_and_an_upload_in_progress_is_not_cut() {
    let (_local, dir, client) = fixture();
    let hour = Duration::from_secs(3600);
    // A view no publish ever committed: two uploads, one crashed 2 h ago, one 1 min old.
    let crashed = version_at(millis_ago(2 * hour), 1);
    let uploading = version_at(millis_ago(Duration::from_secs(60)), 2);
    put(&client, &format!("proj/never/_v/{crashed}/part"), "lost");
    put(&client, &format!("proj/never/_v/{uploading}/part"), "coming");
    // A view current since 3 h ago, with a crash's orphan from 2 h ago.
    let old = version_at(millis_ago(3 * hour), 3);
    let orphan = version_at(millis_ago(2 * hour), 4);
    put(&client, &format!("proj/v/2/_v/{old}/part"), "old");
    put(&client, &format!("proj/v/2/_v/{orphan}/part"), "orphan");
    put(&client, "proj/v/2/_CURRENT", &format!(r#"{{"format":1,"version":"{old}"}}"#));
    let data = key(&dir, "v/2");
    assert_eq!(dir.read(&data.join("part")).unwrap().as_deref(), Some(&b"old"[..]));

    // A publish now sweeps its view: the orphan is not removable yet (it
    // precedes the new current, which is younger than the grace), and the
    // version it replaced is kept for the grace from now.
    dir.publish(staged(&dir, &[("part", "new")]), &data, "_SUCCESS").unwrap();
    let new = dir.current_version(&data).unwrap().unwrap();
    assert_eq!(objects(&client, &format!("proj/v/2/_v/{old}")).len(), 1, "replaced just now: kept");
    assert_eq!(objects(&client, &format!("proj/v/2/_v/{orphan}")).len(), 1);

    // `trellis gc` now: the never-committed view's old orphan goes, the
    // upload in progress and everything of v/2 stay.
    let collected = dir.collect_at(SystemTime::now(), hour, false).unwrap();
    let keys: Vec<&str> = collected.views.iter().map(|view| view.key.as_str()).collect();
    assert_eq!(keys, ["never", "v/2"]);
    assert_eq!(collected.views[0].current, None);
    assert_eq!(collected.views[0].removed.versions, 1);
    assert_eq!(objects(&client, "proj/never/_v"), [format!("proj/never/_v/{uploading}/part")]);
    assert_eq!(collected.views[1].removed, Tally::default());
    assert_eq!(collected.views[1].kept.versions, 3);

    // After the grace: both old versions of v/2 go, the current stays.
    let later = dir.collect_at(SystemTime::now() + 2 * hour, hour, false).unwrap();
    assert_eq!(later.views[1].removed.versions, 2, "{later:?}");
    assert_eq!(
        objects(&client, "proj/v/2/_v"),
        [format!("proj/v/2/_v/{new}/_SUCCESS"), format!("proj/v/2/_v/{new}/part")]
    );
    assert_eq!(dir.read(&data.join("part")).unwrap().as_deref(), Some(&b"new"[..]));
}

/// The probe `validate` and `serve` start with: a root that is there and
/// writable passes and leaves nothing; a missing bucket and an endpoint
/// nobody listens on are each one line saying so.
#[test]
fn a_probe_says_in_one_line_why_a_root_cannot_be_written() {
    let moto = moto();
    let local = tempfile::tempdir().unwrap();
    let bucket = moto.bucket(false);
    let dir = moto.dir(&bucket, local.path());
    dir.probe().unwrap();
    assert_eq!(objects(&moto.client(&bucket), ""), Vec::<String>::new(), "the probe object is deleted");

    let missing = moto.dir("trellis-no-such-bucket", local.path());
    let cause = missing.probe().unwrap_err();
    assert!(cause.starts_with("no such bucket"), "{cause}");
    assert!(!cause.contains('\n'), "{cause}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let environment = crate::moto::ENVIRONMENT.iter().map(|(key, value)| (key.to_string(), value.to_string()));
    let config = S3Config { endpoint: Some(format!("http://127.0.0.1:{closed}")), ..moto.config(&bucket) };
    let dead = ObjectDir::s3_from(&config, local.path(), environment).unwrap();
    let cause = dead.probe().unwrap_err();
    assert_eq!(cause, format!("endpoint unreachable: cannot connect to http://127.0.0.1:{closed}"));
}

/// Two stores (two servers on one bucket by mistake) upload a version of
/// one view from the same pointer, then commit at once: every time exactly
/// one commits, and the other is told so and leaves nothing of its version.
/// The first race is over no pointer (`If-None-Match: *`), the others over
/// the winner's (`If-Match`).
#[test]
fn of_two_writers_racing_on_one_view_exactly_one_wins() {
    let moto = moto();
    let bucket = moto.bucket(false);
    let (local_a, local_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writers = [moto.dir(&bucket, local_a.path()), moto.dir(&bucket, local_b.path())];
    let client = moto.client(&bucket);
    let data = key(&writers[0], "v/1");
    for race in 0..20 {
        let pending: Vec<_> = writers
            .iter()
            .map(|dir| dir.upload(staged(dir, &[("part", &format!("{race}"))]), &data).unwrap())
            .collect();
        let versions: Vec<String> = pending.iter().map(|p| p.version().to_string()).collect();
        let start = Barrier::new(2);
        let results: Vec<io::Result<()>> = std::thread::scope(|scope| {
            let commits: Vec<_> = writers
                .iter()
                .zip(pending)
                .map(|(dir, pending)| {
                    let start = &start;
                    scope.spawn(move || {
                        start.wait();
                        dir.commit(pending, "_SUCCESS")
                    })
                })
                .collect();
            commits.into_iter().map(|commit| commit.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..2).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(winners.len(), 1, "race {race}: {results:?}");
        let (winner, loser) = (winners[0], 1 - winners[0]);
        let lost = results[loser].as_ref().unwrap_err();
        assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists, "race {race}: {lost}");
        assert!(lost.to_string().contains("another writer committed this view first"), "{lost}");
        assert_eq!(writers[loser].current_version(&data).unwrap().as_deref(), Some(versions[winner].as_str()));
        assert_eq!(objects(&client, &format!("proj/v/1/_v/{}", versions[loser])), Vec::<String>::new());
        assert_eq!(body(&client, "proj/v/1/_SUCCESS"), versions[winner]);
        assert_eq!(writers[loser].read(&data.join("part")).unwrap().as_deref(), Some(race.to_string().as_bytes()));
    }
    // Every winner's version is left (its part and flag), within the grace.
    let left = objects(&client, "proj/v/1/_v");
    assert_eq!(left.len(), 2 * 20, "{left:?}");
}

/// Two commits of identical bytes: a pointer whose body were the same
/// would keep its ETag and let a stale `If-Match` through. Here each names
/// its version, and the flag and the data's identity change with it.
#[test]
fn commits_of_identical_bytes_are_told_apart() {
    let (_local, dir, client) = fixture();
    let data = key(&dir, "v/1");
    let mut seen = Vec::new();
    for _ in 0..2 {
        dir.publish(staged(&dir, &[("part", "same rows")]), &data, "_SUCCESS").unwrap();
        let pointer = moto().block_on(client.head(&ObjectPath::from("proj/v/1/_CURRENT"))).unwrap();
        seen.push((
            body(&client, "proj/v/1/_CURRENT"),
            pointer.e_tag,
            dir.identity(&data.join("_SUCCESS")).unwrap(),
            dir.identity(&data).unwrap(),
        ));
    }
    let (first, second) = (&seen[0], &seen[1]);
    assert_ne!(first.0, second.0, "pointer bodies");
    assert_ne!(first.1, second.1, "pointer ETags");
    assert_ne!(first.2, second.2, "flag identities");
    assert_ne!(first.3, second.3, "the data's identity (its pointer's)");
    assert_eq!(first.2.size, second.2.size, "the same size: the ETag tells them apart");
}

/// Data delivered by others, with no pointer: listed and read where it
/// lies; a prefix with nothing under it holds no data.
#[test]
fn external_data_without_a_pointer_is_read_as_it_lies() {
    let (_local, dir, client) = fixture();
    moto().block_on(async {
        for (name, content) in [("part-0", "a"), ("sub/part-1", "bb"), ("_SUCCESS", "")] {
            let location = ObjectPath::from(format!("proj/raw/2015/05/01/{name}"));
            client.put(&location, content.into()).await.unwrap();
        }
    });
    let data = key(&dir, "raw/2015/05/01");
    assert!(dir.holds_data(&data));
    assert_eq!(dir.current_version(&data).unwrap(), None);
    assert_eq!(names(&dir, &data), ["_SUCCESS", "part-0", "sub/", "sub/part-1"]);
    let sizes: Vec<u64> =
        dir.list(&data, &ALL).unwrap().iter().filter(|e| !e.is_dir).map(|e| e.identity.size).collect();
    assert_eq!(sizes.iter().sum::<u64>(), 3);
    assert_eq!(dir.read(&data.join("sub/part-1")).unwrap().as_deref(), Some(&b"bb"[..]));
    assert_eq!(dir.identity(&data.join("_SUCCESS")).unwrap().size, 0);
    // What a walk does not keep is not listed, nor is what is below it.
    let keep = |name: &str| !name.starts_with('_') && name != "sub";
    let kept = dir.list(&data, &Walk { follow_links: true, exact_names: true, keep: &keep }).unwrap();
    assert_eq!(kept.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["part-0"]);
    let empty = key(&dir, "raw/2015/05/02");
    assert!(!dir.holds_data(&empty));
    assert!(!dir.exists(&empty.join("_SUCCESS")));
    assert_eq!(dir.list(&empty, &ALL).unwrap_err().kind(), io::ErrorKind::NotFound);
    assert_eq!(dir.read(&empty.join("part-0")).unwrap(), None);
}

/// An empty flag rewritten keeps its ETag, and Last-Modified has
/// one-second resolution: where the bucket keeps versions, the version id
/// tells the rewrite at once; where it does not, the identity changes as
/// soon as Last-Modified does, and not before.
#[test]
fn a_rewritten_empty_flag_changes_identity_with_its_version_or_last_modified() {
    let moto = moto();
    let local = tempfile::tempdir().unwrap();
    for versioned in [true, false] {
        let bucket = moto.bucket(versioned);
        let dir = moto.dir(&bucket, local.path());
        let client = moto.client(&bucket);
        let location = ObjectPath::from("proj/raw/1/_SUCCESS");
        let flag = key(&dir, "raw/1/_SUCCESS");
        let deliver = || {
            moto.block_on(async {
                client.put(&location, "".into()).await.unwrap();
                client.head(&location).await.unwrap()
            })
        };
        let first = deliver();
        let identity = dir.identity(&flag).unwrap();
        assert_eq!(dir.identity(&flag), Some(identity), "unchanged, the same");
        if versioned {
            let again = deliver();
            assert_eq!(again.e_tag, first.e_tag, "an empty object's ETag does not change");
            assert_ne!(again.version, first.version);
            assert_ne!(dir.identity(&flag).unwrap(), identity, "told apart by its version id");
            continue;
        }
        assert_eq!(first.version, None);
        crate::support::eventually_blocking("a rewrite in the next second", || {
            let again = deliver();
            assert_eq!(again.e_tag, first.e_tag);
            let now = dir.identity(&flag).unwrap();
            if again.last_modified == first.last_modified {
                assert_eq!(now, identity, "within the second, nothing tells a rewrite");
                false
            } else {
                assert_ne!(now, identity);
                true
            }
        });
    }
}

/// Awaited flags are polled by one listing where several share a prefix
/// (the days of a month), by a HEAD where one is alone; what arrived or
/// was rewritten is reported by the next `changed` and nothing else is;
/// a published flag (trellis's own) costs no request at all.
#[test]
fn awaited_flags_are_polled_by_one_listing_where_they_share_a_prefix() {
    use std::collections::HashSet;
    use trellis::storage::poll::Asked;
    use trellis::storage::watch::{Changed, Watches};

    let (_local, dir, client) = fixture();
    let put = |relative: &str, body: &'static str| {
        moto().block_on(client.put(&ObjectPath::from(format!("proj/{relative}")), body.into())).unwrap();
    };
    put("raw/S/2015/05/01/_SUCCESS", "");
    let storage: trellis::storage::Storage = Arc::new(dir);
    let object = storage.as_object().unwrap();
    let flag = |relative: &str| key(object, relative);
    let mut watches = Watches::of(&storage).unwrap();
    assert!(watches.is_polled() && watches.descriptor().is_none());
    let month = ["raw/S/2015/05/01/_SUCCESS", "raw/S/2015/05/02/_SUCCESS", "raw/S/2015/05/03/_SUCCESS"];
    for (who, relative) in (1..).zip(month) {
        watches.await_flag(who, &flag(relative));
    }
    watches.await_flag(4, &flag("raw/T/2016/01/01/_SUCCESS"));
    watches.watch_published(9, &flag("mart/2015/05/01/_SUCCESS"));
    assert_eq!((watches.watching(1), watches.watching(4), watches.watching(9)), (Some(true), Some(true), Some(true)));

    let before = object.requests();
    assert_eq!(watches.poll(), Asked { heads: 1, lists: 1, pages: 1, changed: 0 });
    let sent = object.requests().since(&before);
    assert_eq!((sent.head, sent.list, sent.total()), (1, 1, 2), "{sent}");
    assert_eq!(watches.changed(), Changed::These(HashSet::new()));

    put("raw/S/2015/05/02/_SUCCESS", "");
    put("raw/S/2015/05/01/_SUCCESS", "delivered again");
    put("raw/T/2016/01/01/_SUCCESS", "");
    put("raw/S/2015/05/03/beside", "not a flag");
    assert_eq!(watches.poll().changed, 3);
    assert_eq!(watches.changed(), Changed::These(HashSet::from([1, 2, 4])));
    assert_eq!((watches.watching(1), watches.watching(3)), (None, Some(true)), "reported, no longer watched");
    assert_eq!(watches.changed(), Changed::These(HashSet::new()), "reported once");
    // One flag left in its month: a HEAD is cheaper than a listing.
    assert_eq!(watches.poll(), Asked { heads: 1, lists: 0, pages: 0, changed: 0 });
}

/// Many flags awaited at once start their watches from one listing of
/// the month they share: those it sees absent are watched from it (no
/// HEAD each), the one there is left to a HEAD (its version id); a flag
/// that arrives afterwards is reported by the next poll, as after a HEAD.
#[test]
fn awaited_flags_absent_from_a_listing_are_watched_without_a_head_each() {
    use std::collections::HashSet;
    use trellis::storage::watch::{Changed, Watches};

    let (_local, dir, client) = fixture();
    let put = |relative: &str| {
        moto().block_on(client.put(&ObjectPath::from(format!("proj/{relative}")), "".into())).unwrap();
    };
    put("raw/S/2015/05/02/_SUCCESS");
    let storage: trellis::storage::Storage = Arc::new(dir);
    let object = storage.as_object().unwrap();
    let mut watches = Watches::of(&storage).unwrap();
    let days: Vec<(u32, Key)> =
        (1..=5).map(|day| (day, key(object, &format!("raw/S/2015/05/{day:02}/_SUCCESS")))).collect();

    let before = object.requests();
    let started = watches.await_absent(&days);
    let sent = object.requests().since(&before);
    assert_eq!(started, [true, false, true, true, true]);
    assert_eq!((sent.list, sent.total()), (1, 1), "{sent}");
    assert_eq!((watches.watching(1), watches.watching(2)), (Some(true), None));
    assert!(watches.await_flag(2, &days[1].1).is_some_and(|seen| seen.is_some()), "the one there: a HEAD");

    put("raw/S/2015/05/04/_SUCCESS");
    watches.poll();
    assert_eq!(watches.changed(), Changed::These(HashSet::from([4])));
}

/// A run's judgements look at their flags together: the flags (and
/// pointers) of a month's days are seen by one listing of the month, each
/// as `identity` tells it where the bucket keeps no versions (a listing
/// names no version id, so where it keeps them the identity may differ
/// and the judgement HEADs); a day with nothing is seen as nothing, a
/// committed view without its flag by its pointer, and a key alone in its
/// prefix is left to `identity` (a HEAD is cheaper than a listing).
#[test]
fn flags_sharing_a_prefix_are_sighted_by_one_listing() {
    use trellis::storage::Sighting;

    let (_local, dir, client) = fixture();
    put(&client, "proj/raw/2015/05/01/_SUCCESS", "");
    put(&client, "proj/raw/2015/05/02/_SUCCESS", "delivered");
    put(&client, "proj/raw/2015/05/02/part-0", "rows");
    put(&client, "proj/raw/2016/01/01/_SUCCESS", "");
    dir.publish(staged(&dir, &[("part", "rows")]), &key(&dir, "raw/2015/05/04"), "").unwrap();
    let keys: Vec<Key> = [
        "raw/2015/05/01/_SUCCESS",
        "raw/2015/05/02/_SUCCESS",
        "raw/2015/05/03/_SUCCESS",
        "raw/2015/05/04/_SUCCESS",
        "raw/2016/01/01/_SUCCESS",
    ]
    .iter()
    .map(|relative| key(&dir, relative))
    .collect();

    let before = dir.requests();
    let sighted = dir.sight(&keys);
    let sent = dir.requests().since(&before);
    assert_eq!((sent.list, sent.total()), (1, 1), "{sent}");
    let identity = |relative: &str| dir.identity(&key(&dir, relative));
    assert_eq!(
        sighted,
        [
            Sighting::Listed(identity("raw/2015/05/01/_SUCCESS")),
            Sighting::Listed(identity("raw/2015/05/02/_SUCCESS")),
            Sighting::Listed(None),
            Sighting::Listed(identity("raw/2015/05/04/_CURRENT")),
            Sighting::Unknown,
        ]
    );
    assert!(matches!(sighted[0], Sighting::Listed(Some(_))) && matches!(sighted[3], Sighting::Listed(Some(_))));
}

/// A `latest()` walk asks whether each day's flag is there, from the
/// newest day back, one at a time: its presence lists each month once at
/// the first day asked in it, where each absent day would cost three
/// HEADs. Its answers are what `exists` says, a published view's included.
#[test]
fn a_walk_asking_day_after_day_lists_each_month_once() {
    let (_local, dir, client) = fixture();
    put(&client, "proj/raw/2015/05/02/_SUCCESS", "");
    put(&client, "proj/raw/2015/04/30/_SUCCESS", "");
    dir.publish(staged(&dir, &[("part", "rows")]), &key(&dir, "raw/2015/05/04"), "").unwrap();
    let days: Vec<Key> = (1..=30)
        .rev()
        .map(|day| format!("raw/2015/05/{day:02}/_SUCCESS"))
        .chain((1..=30).rev().map(|day| format!("raw/2015/04/{day:02}/_SUCCESS")))
        .map(|relative| key(&dir, &relative))
        .collect();

    let before = dir.requests();
    let presence = dir.presence();
    let found: Vec<bool> = days.iter().map(|day| presence.exists(day)).collect();
    let sent = dir.requests().since(&before);
    assert_eq!((sent.list, sent.total()), (2, 2), "{sent}");
    assert_eq!(found, days.iter().map(|day| dir.exists(day)).collect::<Vec<_>>());
    let present: Vec<&Key> = days.iter().zip(&found).filter(|(_, there)| **there).map(|(day, _)| day).collect();
    assert_eq!(present, [&days[26], &days[28], &days[30]], "May 4th (published), May 2nd, April 30th");
}
