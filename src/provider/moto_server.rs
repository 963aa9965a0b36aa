//! Test support: a local `moto` server standing in for SES.
//!
//! [`MotoServer::start`] runs `python -m moto.server` on a free loopback port
//! (the interpreter comes from `PIGEONHOLE_TEST_MOTO_PYTHON`, default
//! `python3`) and waits until it answers; the server is killed and reaped when
//! the [`MotoServer`] is dropped, also on panic. Messages sent through it can
//! be read back from moto's model dump, `GET /moto-api/data.json`
//! (`ses.RawMessage`: `id`, `source`, `destinations`, `raw_data`).
//!
//! Used by the unit tests of the SES provider and by the API tests; not by the
//! service itself.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long moto may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running moto server; killed and reaped when dropped.
pub struct MotoServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MotoServer {
    /// The endpoint URL to give the SES client, e.g. `http://127.0.0.1:5000`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The loopback port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts `python -m moto.server` on a free port and waits until it answers.
    pub async fn start() -> Result<MotoServer, String> {
        let python = std::env::var("PIGEONHOLE_TEST_MOTO_PYTHON")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "python3".to_owned());
        let port = free_port();
        let child = std::process::Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        let mut server = MotoServer { child, port };

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(exit)) = server.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = server.child.stderr.take() {
                    use std::io::Read;
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(format!(
                    "`{python} -m moto.server` exited with {exit}: {}",
                    stderr.trim()
                ));
            }
            if let Ok((200, _)) = http_get(port, "/moto-api/data.json").await {
                // Don't let a full stderr pipe block the server.
                drop(server.child.stderr.take());
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!("moto did not answer on port {port} within 60s"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts moto, or explains why `what` cannot run: in CI (`CI=true`) a
    /// missing moto is a failure (this panics), elsewhere it prints a note and
    /// returns `None` so that the caller can skip.
    pub async fn start_or_skip(what: &str) -> Option<MotoServer> {
        match MotoServer::start().await {
            Ok(moto) => Some(moto),
            Err(reason) => {
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!(
                        "moto is required in CI (set PIGEONHOLE_TEST_MOTO_PYTHON to a python \
                         with `moto[server]` installed): {reason}"
                    );
                }
                println!("moto not available, {what} skipped ({reason})");
                None
            }
        }
    }

    /// GET `path` on this server; status and body.
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
        http_get(self.port, path).await
    }

    /// Moto's model dump, `GET /moto-api/data.json`, parsed.
    pub async fn data(&self) -> serde_json::Value {
        let (status, body) = self
            .get("/moto-api/data.json")
            .await
            .expect("GET /moto-api/data.json");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).expect("data.json is JSON")
    }

    /// The raw messages moto has accepted (`ses.RawMessage` in the dump).
    pub async fn raw_messages(&self) -> Vec<serde_json::Value> {
        let data = self.data().await;
        match &data["ses"]["RawMessage"] {
            serde_json::Value::Array(list) => list.clone(),
            // Moto leaves the model out of the dump until it has an instance.
            serde_json::Value::Null => Vec::new(),
            other => panic!("ses.RawMessage in data.json is not a list: {other}"),
        }
    }
}

/// A loopback port nothing listened on a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// Minimal HTTP/1.0 GET to `127.0.0.1:port`; returns status and body.
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of HTTP headers"))?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, response[split + 4..].to_vec()))
}
