//! External commands run with a deadline, and what they printed.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long any external client may run before it is killed.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(15);

/// What a command printed, and whether it exited with success in time.
#[derive(Debug)]
pub struct Run {
    pub success: bool,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout and stderr together, for failure messages.
    pub fn all(&self) -> String {
        format!(
            "success={} timed_out={}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.success, self.timed_out, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with `stdin` written to it, killing it after `deadline`.
pub fn run_cmd(cmd: &mut Command, stdin: &[u8], deadline: Duration) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = thread::spawn(move || {
        let _ = input.write_all(&data);
        // Dropping `input` closes the pipe.
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if start.elapsed() > deadline {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Run {
        success: status.is_some_and(|s| s.success()),
        timed_out,
        stdout,
        stderr,
    }
}
