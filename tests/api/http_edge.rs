//! The HTTP edge: connection deadlines and caps, error shapes that hyper or
//! axum would otherwise write, and bounded metrics labels.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{TestApp, assert_error, spawn_app, spawn_app_with};

const BODY_LIMIT: usize = 30 * 1024 * 1024;

fn addr(app: &TestApp) -> SocketAddr {
    app.base
        .trim_start_matches("http://")
        .parse()
        .expect("test app address")
}

/// A connection to the app from a chosen loopback source address.
async fn connect_from(app: &TestApp, source: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(addr(app)).await.unwrap()
}

struct Raw {
    status: u16,
    head: String,
    body: Value,
    text: String,
}

/// Reads one response (with a Content-Length) from `stream`; `None` if the
/// server closed or reset the connection first.
async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> Option<Raw> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let raw = &buf[head_end..head_end + length];
    Some(Raw {
        status,
        head,
        body: serde_json::from_slice(raw).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(raw).to_string(),
    })
}

async fn get_healthz(stream: &mut TcpStream) -> Option<Raw> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .ok()?;
    read_response(stream).await
}

/// How long until the server closes `stream` (reading and discarding), at most `limit`.
async fn closed_within(stream: &mut (impl AsyncRead + Unpin), limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut sink = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// The server has the connection open: a request on it is answered.
async fn assert_served(stream: &mut TcpStream) {
    let r = get_healthz(stream).await.expect("answered");
    assert_eq!(r.status, 200, "{}", r.head);
}

#[tokio::test]
async fn a_request_head_must_arrive_whole_within_the_header_timeout() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_HEADER_TIMEOUT".into(), "0.3".into());
        m.insert("PIGEONHOLE_HTTP_IDLE_TIMEOUT".into(), "30".into());
    })
    .await;
    // Half a head, then a header byte every 50 ms (slowloris).
    let mut stream = connect_from(&app, "127.0.0.1").await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-slow: ")
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let dribbler = tokio::spawn(async move {
        for _ in 0..60 {
            if writer.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let took = closed_within(&mut reader, Duration::from_secs(3)).await;
    dribbler.abort();
    assert!(
        took.is_some_and(|t| t >= Duration::from_millis(250) && t < Duration::from_millis(1500)),
        "{took:?}"
    );

    // A connection that sends nothing at all is closed too.
    let mut silent = connect_from(&app, "127.0.0.1").await;
    let took = closed_within(&mut silent, Duration::from_secs(3)).await;
    assert!(
        took.is_some_and(|t| t < Duration::from_millis(1500)),
        "{took:?}"
    );

    let metrics = app.call("GET", "/metrics", None, None).await.text;
    assert!(
        metrics.contains("pigeonhole_http_connections_closed_total{reason=\"header_timeout\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_request_body_must_arrive_whole_within_the_body_timeout() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_BODY_TIMEOUT".into(), "0.3".into());
    })
    .await;
    for path in ["/api/v1/domains", "/sns/ses"] {
        let mut stream = connect_from(&app, "127.0.0.1").await;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{",
            app.key
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        // A body byte every 50 ms: never idle, never done.
        let (mut reader, mut writer) = stream.into_split();
        let dribbler = tokio::spawn(async move {
            for _ in 0..60 {
                if writer.write_all(b" ").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let r = tokio::time::timeout(Duration::from_secs(3), read_response(&mut reader))
            .await
            .unwrap_or_else(|_| panic!("{path}: no reply while the body trickles"))
            .expect("a reply");
        let took = started.elapsed();
        assert_eq!(r.status, 408, "{path}: {}", r.head);
        assert_eq!(r.body["code"], "request_timeout", "{path}");
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
            "{path}: {took:?}"
        );
        assert!(
            closed_within(&mut reader, Duration::from_secs(2))
                .await
                .is_some()
        );
        dribbler.abort();
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_HEADER_TIMEOUT".into(), "0.2".into());
        m.insert("PIGEONHOLE_HTTP_IDLE_TIMEOUT".into(), "0.8".into());
    })
    .await;
    let mut stream = connect_from(&app, "127.0.0.1").await;
    assert_served(&mut stream).await;
    // Idle longer than the header timeout: still open, since idle has its own.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_served(&mut stream).await;
    let took = closed_within(&mut stream, Duration::from_secs(3)).await;
    assert!(
        took.is_some_and(|t| t >= Duration::from_millis(600) && t < Duration::from_millis(2000)),
        "{took:?}"
    );
    let metrics = app.call("GET", "/metrics", None, None).await.text;
    assert!(
        metrics.contains("pigeonhole_http_connections_closed_total{reason=\"idle_timeout\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn one_address_gets_at_most_its_cap_while_others_are_served() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP".into(), "3".into());
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = connect_from(&app, "127.0.0.1").await;
        assert_served(&mut s).await;
        held.push(s);
    }
    let mut fourth = connect_from(&app, "127.0.0.1").await;
    match get_healthz(&mut fourth).await {
        None => {}
        Some(r) => {
            assert_eq!(r.status, 429, "{}", r.head);
            assert_eq!(r.body["code"], "rate_limited");
        }
    }
    assert!(
        closed_within(&mut fourth, Duration::from_secs(2))
            .await
            .is_some()
    );

    let mut other = connect_from(&app, "127.0.0.2").await;
    assert_served(&mut other).await;
    assert_served(&mut held[0]).await;

    // A place freed is a place taken.
    held.pop();
    let mut again = None;
    for _ in 0..50 {
        let mut s = connect_from(&app, "127.0.0.1").await;
        if get_healthz(&mut s).await.is_some_and(|r| r.status == 200) {
            again = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the freed place was never given back");
}

#[tokio::test]
async fn at_the_global_cap_idle_connections_make_room_for_a_health_check() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_MAX_CONNECTIONS".into(), "3".into());
        m.insert("PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP".into(), "0".into());
    })
    .await;
    // Fill the cap: one idle keep-alive, two silent.
    let mut idle = connect_from(&app, "127.0.0.1").await;
    assert_served(&mut idle).await;
    let mut silent_a = connect_from(&app, "127.0.0.2").await;
    let mut silent_b = connect_from(&app, "127.0.0.3").await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut health = connect_from(&app, "127.0.0.4").await;
    assert_served(&mut health).await;
    // The oldest idle one gave up its place; the rest stay.
    assert!(
        closed_within(&mut idle, Duration::from_secs(2))
            .await
            .is_some()
    );
    assert!(
        closed_within(&mut silent_a, Duration::from_millis(200))
            .await
            .is_none()
    );

    // Only busy connections left (each waiting for the rest of its body):
    // a newcomer is refused, not served beyond the cap.
    for s in [&mut silent_a, &mut silent_b, &mut health] {
        s.write_all(b"POST /sns/ses HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n{")
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refused = connect_from(&app, "127.0.0.5").await;
    match get_healthz(&mut refused).await {
        None => {}
        Some(r) => {
            assert_eq!(r.status, 503, "{}", r.head);
            assert_eq!(r.body["code"], "server_error");
        }
    }
    // The metrics need a place of their own: end one busy request.
    silent_a.write_all(&[b' '; 99]).await.unwrap();
    let r = read_response(&mut silent_a).await.expect("answered");
    assert!(r.status >= 400, "{}", r.head);
    silent_a
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    let metrics_text = read_response(&mut silent_a).await.expect("metrics").text;
    assert!(
        metrics_text.contains("pigeonhole_http_connections_closed_total{reason=\"evicted\"} 1"),
        "{metrics_text}"
    );
    assert!(
        metrics_text.contains("pigeonhole_http_connections_closed_total{reason=\"global_cap\"} 1"),
        "{metrics_text}"
    );
}

#[tokio::test]
async fn handlers_still_see_the_client_address() {
    // The unauthenticated limit is per client address.
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_RATE_LIMIT".into(), "2".into());
    })
    .await;
    let status_from = |source: &'static str| {
        let app = &app;
        async move {
            let mut s = connect_from(app, source).await;
            s.write_all(b"GET /api/v1/me HTTP/1.1\r\nhost: t\r\n\r\n")
                .await
                .unwrap();
            read_response(&mut s).await.expect("answered").status
        }
    };
    assert_eq!(status_from("127.0.0.1").await, 401);
    assert_eq!(status_from("127.0.0.1").await, 401);
    assert_eq!(status_from("127.0.0.1").await, 429);
    assert_eq!(status_from("127.0.0.2").await, 401);
}

#[tokio::test]
async fn shutdown_closes_idle_and_silent_connections_at_once() {
    let app = spawn_app().await;
    let mut idle = connect_from(&app, "127.0.0.1").await;
    assert_served(&mut idle).await;
    let _silent = connect_from(&app, "127.0.0.1").await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), app.stop())
        .await
        .expect("shutdown waits for no idle connection");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// Sends `len` bytes to `path` chunked (no Content-Length) and reads the reply.
async fn post_chunked(app: &TestApp, path: &str, len: usize) -> Raw {
    let mut stream = connect_from(app, "127.0.0.1").await;
    let (mut reader, mut writer) = stream.split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        app.key
    );
    let write = async {
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            writer.write_all(format!("{n:x}\r\n").as_bytes()).await?;
            writer.write_all(&chunk[..n]).await?;
            writer.write_all(b"\r\n").await?;
            left -= n;
        }
        writer.write_all(b"0\r\n\r\n").await
    };
    let (_, reply) = tokio::join!(write, read_response(&mut reader));
    reply.unwrap_or_else(|| panic!("no reply to the chunked POST {path}"))
}

#[tokio::test]
async fn oversized_bodies_are_413_json_on_every_route_however_sent() {
    let app = spawn_app().await;
    let big = vec![b' '; BODY_LIMIT + 1];
    for path in ["/api/v1/emails", "/api/v1/domains"] {
        let r = app
            .client
            .post(format!("{}{path}", app.base))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413, "{path}");
        assert_eq!(r.headers()["content-type"], "application/json", "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "payload_too_large", "{path}");
    }
    for path in [
        "/api/v1/emails",
        "/api/v1/emails/batch",
        "/api/v1/threads/thr_x/reply",
        "/sns/ses",
        "/api/v1/domains",
    ] {
        let r = post_chunked(&app, path, BODY_LIMIT + 1).await;
        assert_eq!(r.status, 413, "{path}: {}", r.head);
        assert_eq!(r.body["code"], "payload_too_large", "{path}: {}", r.head);
    }
}

#[tokio::test]
async fn heads_over_the_limits_are_431_and_414_json() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_MAX_HEADER_BYTES".into(), "8192".into());
        m.insert("PIGEONHOLE_HTTP_MAX_URI_BYTES".into(), "2048".into());
    })
    .await;
    let url = format!("{}/api/v1/me", app.base);
    let to_resp = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        crate::helpers::Resp {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    };

    let big = "a".repeat(9000);
    let r = app
        .client
        .get(&url)
        .bearer_auth(&app.key)
        .header("x-big", &big)
        .send()
        .await
        .unwrap();
    assert_error(&to_resp(r).await, 431, "headers_too_large");

    let mut many = app.client.get(&url).bearer_auth(&app.key);
    for i in 0..120 {
        many = many.header(format!("x-h{i}"), "v");
    }
    assert_error(
        &to_resp(many.send().await.unwrap()).await,
        431,
        "headers_too_large",
    );

    let long = format!("{url}?q={}", "a".repeat(3000));
    let r = app
        .client
        .get(&long)
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_error(&to_resp(r).await, 414, "uri_too_long");

    // Within the limits all is well.
    let r = app
        .client
        .get(format!("{url}?q={}", "a".repeat(1500)))
        .bearer_auth(&app.key)
        .header("x-big", "a".repeat(6000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_head_far_over_the_limits_is_not_buffered() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_HTTP_MAX_HEADER_BYTES".into(), "8192".into());
        m.insert("PIGEONHOLE_HTTP_MAX_URI_BYTES".into(), "2048".into());
    })
    .await;
    // 64 KB of one header and no end: hyper's buffer (sized from the limits,
    // not its 400 KB default) is full long before, so it answers and closes
    // without waiting for the header timeout.
    let mut stream = connect_from(&app, "127.0.0.1").await;
    let mut head = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 64 * 1024));
    let _ = stream.write_all(&head).await;
    let took = closed_within(&mut stream, Duration::from_secs(3)).await;
    assert!(took.is_some_and(|t| t < Duration::from_secs(1)), "{took:?}");
}

#[tokio::test]
async fn a_wrong_method_is_405_json() {
    let app = spawn_app().await;
    let r = app.call("DELETE", "/healthz", None, None).await;
    assert_error(&r, 405, "method_not_allowed");
    assert!(r.header("allow").is_some_and(|a| a.contains("GET")));
    let r = app
        .call("PUT", "/api/v1/emails", Some(&app.key.clone()), None)
        .await;
    assert_error(&r, 405, "method_not_allowed");
}

fn series(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("pigeonhole_http_requests_total{"))
        .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
        .collect()
}

#[tokio::test]
async fn invented_methods_and_paths_add_no_metrics_series() {
    let app = spawn_app().await;
    let send = |method: String, path: String| {
        let app = &app;
        async move {
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            app.client
                .request(m, format!("{}{path}", app.base))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    // One of each kind first, then many more of the same kinds.
    let kinds = |i: usize| {
        [
            (format!("INVENTED{i}"), "/healthz".to_string()),
            (format!("INVENTED{i}"), format!("/nothing-{i}")),
            ("GET".to_string(), format!("/nothing-{i}/deeper")),
            (format!("X{i}"), format!("/api/v1/nothing-{i}")),
            ("GET".to_string(), format!("/api/v1/nothing-{i}")),
        ]
    };
    for (m, p) in kinds(0) {
        send(m, p).await;
    }
    let before = series(&app.call("GET", "/metrics", None, None).await.text);
    for i in 1..60 {
        for (m, p) in kinds(i) {
            send(m, p).await;
        }
    }
    let text = app.call("GET", "/metrics", None, None).await.text;
    let after = series(&text);
    // The one new series is GET /metrics itself.
    let new: Vec<_> = after.iter().filter(|s| !before.contains(s)).collect();
    assert!(
        new.iter().all(|s| s.contains("route=\"/metrics\"")),
        "{new:?}"
    );
    assert!(
        !text.contains("INVENTED") && !text.contains("nothing-"),
        "{text}"
    );
    assert!(text.contains("method=\"other\""), "{text}");
    assert!(text.contains("route=\"unmatched\""), "{text}");
}
