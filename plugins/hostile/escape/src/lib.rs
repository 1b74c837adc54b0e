//! Hostile fixture: tries every way out of the sandbox and writes what
//! happened to `report.txt` in its output, one `attempt: result` line each.
//! A contained attempt reports `denied (<error>)`.

use std::fmt::Write as _;
use std::net::{TcpStream, UdpSocket};

use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, ResultExt, Transformation, export_transformation};

struct Hostile;

fn attempt<T>(report: &mut String, name: &str, result: std::io::Result<T>) -> u64 {
    match result {
        Ok(_) => {
            writeln!(report, "{name}: ESCAPED").unwrap();
            1
        }
        Err(e) => {
            writeln!(report, "{name}: denied ({e})").unwrap();
            0
        }
    }
}

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-escape", "0.0.0")
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        let mut report = String::new();
        let mut escaped = 0;
        let input = &request.inputs.first().ok_or_else(|| Failure::fatal("needs one input"))?.path;
        let output = &request.output;
        escaped += attempt(&mut report, "read /etc/passwd", std::fs::read("/etc/passwd"));
        escaped += attempt(&mut report, "list /", std::fs::read_dir("/"));
        escaped += attempt(&mut report, "read ../ of the output", std::fs::read_dir(format!("{output}/..")));
        escaped += attempt(&mut report, "read ../../ of an input", std::fs::read_dir(format!("{input}/../..")));
        escaped += attempt(&mut report, "write into an input", std::fs::write(format!("{input}/planted"), b"x"));
        escaped += attempt(&mut report, "delete an input file", {
            let victim = std::fs::read_dir(input)
                .ok()
                .and_then(|mut entries| entries.next())
                .and_then(|entry| entry.ok())
                .map(|entry| entry.path());
            match victim {
                Some(path) => std::fs::remove_file(path),
                None => Err(std::io::Error::other("input is empty")),
            }
        });
        escaped += attempt(&mut report, "tcp connect 127.0.0.1:22", TcpStream::connect("127.0.0.1:22"));
        escaped += attempt(&mut report, "udp bind", UdpSocket::bind("0.0.0.0:0"));
        let env_count = std::env::vars().count();
        escaped += attempt(
            &mut report,
            "read the environment",
            if env_count == 0 { Err(std::io::Error::other("empty")) } else { Ok(env_count) },
        );
        let mut out = request.create_output_file("report.txt")?;
        std::io::Write::write_all(&mut out, report.as_bytes()).or_fatal(|| "report.txt")?;
        Ok(Outcome::Data(vec![("escaped".into(), escaped)]))
    }
}

export_transformation!(Hostile);
