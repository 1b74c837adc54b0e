//! A finished job's data moved into the view's staging directory under
//! trellis's own names (`part-00000.csv`, not Spark's
//! `part-00000-<uuid>-c000.csv`), so that the published data is the same
//! shape whichever engine wrote it, and a rebuild replaces its files
//! rather than adding new ones beside them.

use std::io;
use std::path::Path;

use crate::storage::grant;

/// Moves what Spark wrote into `output` up into `staging`: its part files
/// renamed `part-NNNNN<suffix>` in Spark's order (the suffix is what
/// follows the name's first dot: `.csv`, `.snappy.parquet`), other files
/// and directories (a partitioned write's `shop=SHOP10/`) as they are.
/// Spark's bookkeeping (`_SUCCESS`, `.crc` files) stays behind, with the
/// rest of the scratch directory. Returns how many entries were moved.
pub fn collect(output: &Path, staging: &Path) -> io::Result<usize> {
    let entries = grant::entries(output)?;
    let data: Vec<_> = entries.iter().filter(|e| !e.name.starts_with('_') && !e.name.starts_with('.')).collect();
    let mut parts = 0;
    for entry in &data {
        let name = &entry.name;
        let new_name = if name.starts_with("part-") && entry.is_file {
            let suffix = name.find('.').map_or("", |dot| &name[dot..]);
            parts += 1;
            format!("part-{:05}{suffix}", parts - 1)
        } else {
            name.clone()
        };
        grant::move_into(output, name, staging, &new_name)?;
    }
    Ok(data.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_get_trellis_names_and_bookkeeping_stays_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (output, staging) = (dir.path().join("scratch/output"), dir.path().join("staging"));
        std::fs::create_dir_all(output.join("shop=SHOP10")).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        for name in [
            "part-00001-6c1e-c000.snappy.parquet",
            "part-00000-6c1e-c000.snappy.parquet",
            "_SUCCESS",
            ".part-00000-6c1e-c000.snappy.parquet.crc",
            "shop=SHOP10/part-00000-9f-c000.csv",
        ] {
            std::fs::write(output.join(name), name).unwrap();
        }
        assert_eq!(collect(&output, &staging).unwrap(), 3);
        let mut moved: Vec<String> = std::fs::read_dir(&staging)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        moved.sort();
        assert_eq!(moved, ["part-00000.snappy.parquet", "part-00001.snappy.parquet", "shop=SHOP10"]);
        assert_eq!(
            std::fs::read_to_string(staging.join("part-00000.snappy.parquet")).unwrap(),
            "part-00000-6c1e-c000.snappy.parquet"
        );
        assert!(output.join("_SUCCESS").exists(), "left with the scratch directory");
    }
}
