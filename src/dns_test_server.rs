//! A tiny in-process authoritative DNS server for tests.
//!
//! It answers A, AAAA, MX and TXT queries over UDP and TCP on 127.0.0.1 from an
//! in-memory table that tests may change while it runs. Unknown names get
//! NXDOMAIN, known names without the asked type get an empty NOERROR; both
//! carry an SOA with a zero negative TTL. Malformed packets are ignored.
//! The server stops when the [`TestDnsServer`] is dropped.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use hickory_proto::op::{Header, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, MX, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

/// TTL of the records served (the client under test must not rely on it).
const TTL: u32 = 60;
/// Largest UDP answer without EDNS (RFC 1035 §4.2.1); larger ones are truncated.
const UDP_MAX: usize = 512;

#[derive(Default, Clone)]
struct Entry {
    /// TXT records, each a list of character-strings.
    txt: Vec<Vec<Vec<u8>>>,
    ips: Vec<IpAddr>,
    /// MX records: preference and exchange.
    mx: Vec<(u16, String)>,
}

type Zone = Arc<Mutex<HashMap<String, Entry>>>;

/// An authoritative DNS server on 127.0.0.1 with records set by the test.
pub struct TestDnsServer {
    addr: SocketAddr,
    records: Zone,
    tasks: Vec<JoinHandle<()>>,
}

impl TestDnsServer {
    /// Bind UDP and TCP on the same free port of 127.0.0.1 and start serving.
    pub async fn start() -> std::io::Result<TestDnsServer> {
        // The UDP port may be taken on TCP by someone else: retry a few times.
        let mut last_err = None;
        for _ in 0..10 {
            let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
            let addr = udp.local_addr()?;
            match TcpListener::bind(addr).await {
                Ok(tcp) => {
                    let records = Zone::default();
                    let tasks = vec![
                        tokio::spawn(serve_udp(udp, records.clone())),
                        tokio::spawn(serve_tcp(tcp, records.clone())),
                    ];
                    return Ok(TestDnsServer {
                        addr,
                        records,
                        tasks,
                    });
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("no free port")))
    }

    /// The address (UDP and TCP) to send queries to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replace the TXT records of `name`, one record per value. Values over
    /// 255 bytes are split into several character-strings, as on the wire.
    pub fn set_txt(&self, name: &str, values: &[&str]) {
        let records = values
            .iter()
            .map(|v| {
                let chunks: Vec<Vec<u8>> = v.as_bytes().chunks(255).map(<[u8]>::to_vec).collect();
                if chunks.is_empty() {
                    vec![Vec::new()]
                } else {
                    chunks
                }
            })
            .collect();
        self.entry(name, |e| e.txt = records);
    }

    /// Replace the TXT records of `name`, giving each record's
    /// character-strings explicitly (each at most 255 bytes).
    pub fn set_txt_strings(&self, name: &str, records: &[&[&str]]) {
        let records = records
            .iter()
            .map(|strings| strings.iter().map(|s| s.as_bytes().to_vec()).collect())
            .collect();
        self.entry(name, |e| e.txt = records);
    }

    /// Replace the addresses of `name`: A records for IPv4, AAAA for IPv6.
    pub fn set_a(&self, name: &str, ips: &[IpAddr]) {
        let ips = ips.to_vec();
        self.entry(name, |e| e.ips = ips);
    }

    /// Replace the MX records of `name`: (preference, exchange) pairs.
    pub fn set_mx(&self, name: &str, records: &[(u16, &str)]) {
        let records = records.iter().map(|(p, h)| (*p, h.to_string())).collect();
        self.entry(name, |e| e.mx = records);
    }

    /// Forget `name` entirely: it answers NXDOMAIN again.
    pub fn remove(&self, name: &str) {
        lock(&self.records).remove(&normalize(name));
    }

    fn entry(&self, name: &str, f: impl FnOnce(&mut Entry)) {
        f(lock(&self.records).entry(normalize(name)).or_default());
    }
}

impl Drop for TestDnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn lock(records: &Zone) -> MutexGuard<'_, HashMap<String, Entry>> {
    // A panicking test thread must not take the server down with it.
    records
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

async fn serve_udp(socket: UdpSocket, records: Zone) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        if let Some(reply) = answer(&buf[..len], &records, Some(UDP_MAX)) {
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

async fn serve_tcp(listener: TcpListener, records: Zone) {
    // Dropping this set (when the task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    connections.spawn(serve_tcp_conn(stream, records.clone()));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_tcp_conn(mut stream: TcpStream, records: Zone) {
    loop {
        let Ok(len) = stream.read_u16().await else {
            return;
        };
        let mut buf = vec![0u8; usize::from(len)];
        if stream.read_exact(&mut buf).await.is_err() {
            return;
        }
        let Some(reply) = answer(&buf, &records, None) else {
            continue;
        };
        let Ok(reply_len) = u16::try_from(reply.len()) else {
            continue;
        };
        if stream.write_u16(reply_len).await.is_err() || stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// The encoded reply to the packet `packet`, or `None` to ignore it.
fn answer(packet: &[u8], records: &Zone, max_len: Option<usize>) -> Option<Vec<u8>> {
    let request = Message::from_vec(packet).ok()?;
    if request.message_type() != MessageType::Query {
        return None;
    }
    let mut reply = Message::new();
    reply.set_header(Header::response_from_request(request.header()));
    reply.set_authoritative(true);

    let query = match (request.op_code(), request.queries()) {
        (OpCode::Query, [query]) => query.clone(),
        (OpCode::Query, _) => {
            reply.set_response_code(ResponseCode::FormErr);
            return reply.to_vec().ok();
        }
        _ => {
            reply.set_response_code(ResponseCode::NotImp);
            return reply.to_vec().ok();
        }
    };
    reply.add_query(query.clone());

    let qname = query.name().clone();
    let entry = lock(records).get(&normalize(&qname.to_ascii())).cloned();
    let Some(entry) = entry else {
        reply.set_response_code(ResponseCode::NXDomain);
        reply.add_name_server(soa());
        return reply.to_vec().ok();
    };

    let answers: Vec<Record> = match query.query_type() {
        RecordType::TXT => entry
            .txt
            .iter()
            .map(|strings| {
                let txt = TXT::from_bytes(strings.iter().map(Vec::as_slice).collect());
                Record::from_rdata(qname.clone(), TTL, RData::TXT(txt))
            })
            .collect(),
        RecordType::A => entry
            .ips
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V4(v4) => Some(Record::from_rdata(qname.clone(), TTL, RData::A(A(*v4)))),
                IpAddr::V6(_) => None,
            })
            .collect(),
        RecordType::AAAA => entry
            .ips
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V6(v6) => Some(Record::from_rdata(
                    qname.clone(),
                    TTL,
                    RData::AAAA(AAAA(*v6)),
                )),
                IpAddr::V4(_) => None,
            })
            .collect(),
        RecordType::MX => entry
            .mx
            .iter()
            .filter_map(|(preference, host)| {
                let exchange = Name::from_utf8(host).ok()?;
                Some(Record::from_rdata(
                    qname.clone(),
                    TTL,
                    RData::MX(MX::new(*preference, exchange)),
                ))
            })
            .collect(),
        _ => Vec::new(),
    };
    if answers.is_empty() {
        reply.add_name_server(soa());
    } else {
        reply.add_answers(answers);
    }

    let bytes = reply.to_vec().ok()?;
    match max_len {
        Some(max) if bytes.len() > max => {
            // Too big for UDP: send the header and question only, with TC set.
            reply.take_answers();
            reply.take_name_servers();
            reply.set_truncated(true);
            reply.to_vec().ok()
        }
        _ => Some(bytes),
    }
}

/// The SOA sent with negative answers; its zero minimum forbids negative caching.
fn soa() -> Record {
    let rdata = SOA::new(
        Name::from_ascii("ns.test.").unwrap_or_default(),
        Name::from_ascii("hostmaster.test.").unwrap_or_default(),
        1,
        3600,
        600,
        86400,
        0,
    );
    Record::from_rdata(Name::root(), 0, RData::SOA(rdata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ignores_garbage_and_stops_on_drop() {
        let server = TestDnsServer::start().await.unwrap();
        let addr = server.addr();
        let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        client.send_to(&[0xff; 7], addr).await.unwrap();
        client.send_to(&[], addr).await.unwrap();

        // A well-formed query after the garbage is still answered.
        let mut query = Message::new();
        query.set_id(42).add_query(hickory_proto::op::Query::query(
            Name::from_ascii("Nope.Example.").unwrap(),
            RecordType::TXT,
        ));
        client
            .send_to(&query.to_vec().unwrap(), addr)
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let len = tokio::time::timeout(std::time::Duration::from_secs(5), client.recv(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let reply = Message::from_vec(&buf[..len]).unwrap();
        assert_eq!(reply.id(), 42);
        assert_eq!(reply.response_code(), ResponseCode::NXDomain);

        drop(server);
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(TcpStream::connect(addr).await.is_err());
    }
}
