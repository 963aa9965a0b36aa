//! Sockets, timeouts and limits around the protocol state machine.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_rustls::TlsAcceptor;

use super::SmtpConfig;
use super::per_client::PerClient;
use super::protocol::{Action, DataReader, DataStep, Envelope, Reply, Session, parse_command};
use super::sessions::{Progress, SessionSlot, Sessions};
use crate::core::inbound;
use crate::core::inbound_auth::{self, Origin, SessionMemo};
use crate::core::memory::{self, MemoryBudget, Reservation};
use crate::dns::Dns;
use crate::store::{Backend, Db};
use crate::telemetry::ReplyClass;
use tracing::Instrument;

/// How long sessions get to finish after shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// An evicted session is closed at the latest this long after its eviction
/// (its 421 written if the client reads it in time).
const EVICTED_CLOSE: Duration = Duration::from_secs(1);
/// Connections over the cap that are still told 421 (beyond, they are just closed).
const MAX_BUSY_REPLIES: usize = 64;
/// Replies are written at the latest when this many bytes are waiting.
const MAX_PENDING_OUTPUT: usize = 64 * 1024;
const READ_BUFFER: usize = 16 * 1024;
/// Lingering close: at most this long and this much input read after the last reply.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

struct Ctx {
    db: Db,
    /// For the sender checks (SPF, DKIM, DMARC) of each message.
    dns: Arc<Dns>,
    config: Arc<SmtpConfig>,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
    /// Shared with every session and with large HTTP requests.
    memory: MemoryBudget,
    /// The end of the session's time ([`SmtpConfig::session_timeout`]).
    deadline: Instant,
    /// Sender checks this session may reuse for its next messages.
    auth_memo: SessionMemo,
    /// Its place among the open sessions, where it reports its progress.
    slot: Arc<SessionSlot>,
    /// The RCPT-time decisions of the current transaction's accepted
    /// recipients, one per address (so at most `max_recipients`), which
    /// storing the message uses instead of deciding each again: one database
    /// read less per recipient.
    decided: Vec<(String, inbound::RecipientDecision)>,
}

impl Ctx {
    fn read_deadline(&self) -> Instant {
        read_deadline(&self.config, self.deadline)
    }

    /// The 421 for a read that ran out of time.
    fn timed_out(&self) -> Reply {
        timeout_reply(&self.config, self.deadline)
    }
}

/// When the next read must have produced a line: one idle period from now,
/// but never past the session's deadline.
fn read_deadline(config: &SmtpConfig, deadline: Instant) -> Instant {
    (Instant::now() + config.idle_timeout).min(deadline)
}

/// 421 4.4.2, saying whether the session or one idle period ran out.
fn timeout_reply(config: &SmtpConfig, deadline: Instant) -> Reply {
    let what = if Instant::now() >= deadline {
        "session time limit exceeded"
    } else {
        "timeout exceeded"
    };
    Reply::new(421, format!("4.4.2 {} Error: {what}", config.hostname))
}

/// The 421 of a session evicted to make room for a newcomer.
fn evicted_reply(config: &SmtpConfig) -> Reply {
    Reply::new(
        421,
        format!(
            "4.3.2 {} Service busy, closing transmission channel",
            config.hostname
        ),
    )
}

/// How far `session` has come, for the choice of whom to evict.
fn progress_of(session: &Session) -> Progress {
    if session.has_recipients() {
        Progress::Rcpt
    } else if session.in_transaction() {
        Progress::Mail
    } else if session.greeted() {
        Progress::Greeted
    } else {
        Progress::Connected
    }
}

/// Serves SMTP on `listener` until `shutdown` resolves; then stops accepting,
/// tells every open session 421 at its next command, and waits (a bounded
/// time) for them to end. A message whose DATA is being stored finishes first.
pub async fn run(
    listener: TcpListener,
    db: Db,
    dns: Arc<Dns>,
    config: SmtpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    crate::init_tls();
    let config = Arc::new(config);
    let tls = config.tls.clone().map(TlsAcceptor::from);
    let registry = Sessions::new(config.max_connections);
    let busy_slots = Arc::new(Semaphore::new(MAX_BUSY_REPLIES));
    let per_client = PerClient::new(config.max_connections_per_ip);
    let memory = config.memory.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut sessions: JoinSet<()> = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while sessions.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "smtp accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // Per client first: an address at its cap must not use up global slots.
        let Some(client_slot) = per_client.try_enter(peer.ip()) else {
            tracing::warn!(peer = %peer, "smtp connection refused: too many from this client");
            config.metrics.smtp_session(ReplyClass::Transient);
            turn_away(
                &mut sessions,
                &busy_slots,
                stream,
                b"421 4.7.0 Too many connections from your address, try again later\r\n",
            );
            continue;
        };
        match registry.admit() {
            Some(slot) => {
                config.metrics.smtp_session(ReplyClass::Positive);
                let slot = Arc::new(slot);
                let watch = slot.clone();
                let ctx = Ctx {
                    db: db.clone(),
                    dns: dns.clone(),
                    config: config.clone(),
                    tls: tls.clone(),
                    stop: stop_rx.clone(),
                    memory: memory.clone(),
                    deadline: Instant::now() + config.session_timeout,
                    auth_memo: SessionMemo::default(),
                    decided: Vec::new(),
                    slot,
                };
                // Every line the session logs carries its id and peer.
                let span = tracing::info_span!(
                    "smtp",
                    session_id = %crate::ids::random_token(12),
                    peer = %peer,
                );
                sessions.spawn(
                    async move {
                        let _client_slot = client_slot;
                        // An evicted session answers 421 when it next waits for
                        // a command; wherever it is stuck instead (a write to a
                        // client that does not read, a TLS handshake), it is
                        // dropped. It holds no accepted message: a session in
                        // DATA cannot be evicted.
                        let evicted = async {
                            watch.evicted().await;
                            tokio::time::sleep(EVICTED_CLOSE).await;
                        };
                        tokio::select! {
                            () = serve_connection(stream, peer, ctx) => {}
                            () = evicted => {
                                tracing::debug!(peer = %peer, "smtp evicted session dropped");
                            }
                        }
                    }
                    .instrument(span),
                );
            }
            None => {
                tracing::warn!(peer = %peer, "smtp connection refused: every session is in DATA");
                config.metrics.smtp_session(ReplyClass::Transient);
                turn_away(
                    &mut sessions,
                    &busy_slots,
                    stream,
                    b"421 4.3.2 Too many connections, try again later\r\n",
                );
            }
        }
    }
    let _ = stop_tx.send(true);
    let drain = async { while sessions.join_next().await.is_some() {} };
    if timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        sessions.abort_all();
    }
    Ok(())
}

/// Tells a connection that cannot be served `reply` and closes it; past
/// [`MAX_BUSY_REPLIES`] such connections at once, just closes it.
fn turn_away(
    sessions: &mut JoinSet<()>,
    busy_slots: &Arc<Semaphore>,
    mut stream: TcpStream,
    reply: &'static [u8],
) {
    if let Ok(permit) = busy_slots.clone().try_acquire_owned() {
        sessions.spawn(async move {
            let _permit = permit;
            let _ = timeout(Duration::from_secs(5), stream.write_all(reply)).await;
        });
    }
}

/// How a conversation over one stream ended.
enum Outcome<S> {
    Closed,
    /// The client asked for STARTTLS: hand the stream over for the handshake.
    Upgrade(S),
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, mut ctx: Ctx) {
    let mut session = Session::new(ctx.config.limits());
    let mut errors = 0usize;
    let greeting = session.greeting();
    tracing::debug!(peer = %peer, "smtp connection");
    let first = conversation(
        stream,
        Some(greeting),
        &mut session,
        &mut errors,
        peer,
        &mut ctx,
    )
    .await;
    let plain = match first {
        Ok(Outcome::Upgrade(s)) => s,
        Ok(Outcome::Closed) => return,
        Err(e) => {
            tracing::debug!(peer = %peer, error = %e, "smtp connection ended");
            return;
        }
    };
    let Some(acceptor) = ctx.tls.clone() else {
        return;
    };
    let tls = match timeout_at(ctx.read_deadline(), acceptor.accept(plain)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(peer = %peer, error = %e, "smtp TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    session.tls_started();
    if let Err(e) = conversation(tls, None, &mut session, &mut errors, peer, &mut ctx).await {
        tracing::debug!(peer = %peer, error = %e, "smtp connection ended");
    }
}

/// What reading one line produced. The line itself is in the caller's buffer.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A line, and whether it ended in a bare LF rather than CRLF.
    Line {
        bare_lf: bool,
    },
    /// More than the limit without a line ending; the rest is still unread.
    TooLong,
    Eof,
}

/// Reads one line (ending in LF, an optional CR before it dropped) into
/// `line`, taking at most `limit` bytes of it.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    rd: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> io::Result<LineRead> {
    line.clear();
    loop {
        let (consumed, done) = {
            let buf = rd.fill_buf().await?;
            if buf.is_empty() {
                return Ok(LineRead::Eof);
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(pos) => {
                    if line.len() + pos > limit {
                        return Ok(LineRead::TooLong);
                    }
                    line.extend_from_slice(&buf[..pos]);
                    (pos + 1, true)
                }
                None => {
                    if line.len() + buf.len() > limit {
                        return Ok(LineRead::TooLong);
                    }
                    line.extend_from_slice(buf);
                    (buf.len(), false)
                }
            }
        };
        rd.consume(consumed);
        if done {
            let crlf = line.last() == Some(&b'\r');
            if crlf {
                line.pop();
            }
            return Ok(LineRead::Line { bare_lf: !crlf });
        }
    }
}

/// Skips the rest of a line, `last_read` being the last byte of it read so
/// far. Returns how many bytes were skipped and whether the line ended in a
/// bare LF, or `None` when `budget` ran out (or the stream ended) before the
/// line did.
async fn discard_line<R: AsyncBufReadExt + Unpin>(
    rd: &mut R,
    last_read: Option<u8>,
    budget: usize,
) -> io::Result<Option<(usize, bool)>> {
    let mut skipped = 0usize;
    let mut last = last_read;
    loop {
        let (consumed, ended_bare) = {
            let buf = rd.fill_buf().await?;
            if buf.is_empty() {
                return Ok(None);
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(pos) => {
                    let before = if pos > 0 {
                        buf.get(pos - 1).copied()
                    } else {
                        last
                    };
                    (pos + 1, Some(before != Some(b'\r')))
                }
                None => {
                    last = buf.last().copied();
                    (buf.len(), None)
                }
            }
        };
        rd.consume(consumed);
        skipped += consumed;
        if let Some(bare_lf) = ended_bare {
            return Ok(Some((skipped, bare_lf)));
        }
        if skipped > budget {
            return Ok(None);
        }
    }
}

async fn write_out<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
    limit: Duration,
) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let result = timeout(limit, async {
        stream.write_all(out).await?;
        stream.flush().await
    })
    .await;
    out.clear();
    match result {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
    }
}

/// Writes what is pending plus `last`, then closes: the write side first,
/// then a bounded "lingering close" that reads what the client still sends,
/// so that unread input does not make the kernel answer with a reset that
/// could destroy the reply before the client reads it.
async fn close_with<S: AsyncRead + AsyncWrite + Unpin>(
    rd: &mut BufReader<S>,
    out: &mut Vec<u8>,
    last: Reply,
    limit: Duration,
) -> io::Result<()> {
    out.extend_from_slice(last.to_wire().as_bytes());
    write_out(rd.get_mut(), out, limit).await?;
    let _ = timeout(limit, rd.get_mut().shutdown()).await;
    let _ = timeout(LINGER.min(limit), async {
        let mut sink = [0u8; 8192];
        let mut total = 0usize;
        while total < LINGER_BYTES {
            match rd.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    Ok(())
}

/// What ended a wait for the next command.
enum Wait<R> {
    Read(R),
    /// The server is shutting down.
    Stop,
    /// A newcomer took this session's place.
    Evicted,
}

/// One conversation over `stream` (plain, or after STARTTLS).
async fn conversation<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    greeting: Option<Reply>,
    session: &mut Session,
    errors: &mut usize,
    peer: SocketAddr,
    ctx: &mut Ctx,
) -> io::Result<Outcome<S>> {
    let config = ctx.config.clone();
    let idle = config.idle_timeout;
    let mut rd = BufReader::with_capacity(READ_BUFFER, stream);
    let mut out: Vec<u8> = Vec::new();
    if let Some(g) = greeting {
        out.extend_from_slice(g.to_wire().as_bytes());
    }
    let mut line: Vec<u8> = Vec::new();
    // Memory reserved for the message of the current transaction.
    let mut reserved: Option<Reservation> = None;
    loop {
        // PIPELINING: answer once the client has nothing more queued.
        if rd.buffer().is_empty() || out.len() > MAX_PENDING_OUTPUT {
            write_out(rd.get_mut(), &mut out, idle).await?;
        }
        // Checked before reading too: a read of pipelined input completes
        // at once, so the timer below wins only when the runtime happens to
        // make the read yield.
        if Instant::now() >= ctx.deadline {
            close_with(&mut rd, &mut out, ctx.timed_out(), idle).await?;
            return Ok(Outcome::Closed);
        }
        let read_by = ctx.read_deadline();
        let read = tokio::select! {
            r = timeout_at(read_by, read_line(&mut rd, &mut line, config.max_line_length)) => Wait::Read(r),
            _ = ctx.stop.wait_for(|stop| *stop) => Wait::Stop,
            () = ctx.slot.evicted() => Wait::Evicted,
        };
        let read = match read {
            Wait::Read(r) => r,
            Wait::Stop => {
                let bye = Reply::new(
                    421,
                    format!("4.3.0 {} Service shutting down", config.hostname),
                );
                close_with(&mut rd, &mut out, bye, idle).await?;
                return Ok(Outcome::Closed);
            }
            Wait::Evicted => {
                // Replies still pending (a 250 for a stored message) go first.
                close_with(&mut rd, &mut out, evicted_reply(&config), EVICTED_CLOSE).await?;
                return Ok(Outcome::Closed);
            }
        };
        match read {
            Err(_) => {
                close_with(&mut rd, &mut out, ctx.timed_out(), idle).await?;
                return Ok(Outcome::Closed);
            }
            Ok(r) => match r? {
                LineRead::Line { .. } => {}
                LineRead::Eof => return Ok(Outcome::Closed),
                LineRead::TooLong => {
                    let bye = Reply::new(500, "5.5.2 Error: line too long, closing connection");
                    close_with(&mut rd, &mut out, bye, idle).await?;
                    return Ok(Outcome::Closed);
                }
            },
        }
        let reply = match session.handle(parse_command(&line)) {
            Action::Reply(r) => r,
            Action::CheckRecipient(address) => {
                let outcome = match inbound::accepts_recipient(&ctx.db, &address).await {
                    Ok(decision) => {
                        let accepted = decision.accepted();
                        if accepted {
                            // A transaction's first accepted recipient: any
                            // decisions kept are of one reset before DATA.
                            if !session.has_recipients() {
                                ctx.decided.clear();
                            }
                            // The latest decision of an address named twice.
                            let key = address.to_lowercase();
                            ctx.decided.retain(|(kept, _)| *kept != key);
                            ctx.decided.push((key, decision));
                        }
                        Ok(accepted)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "smtp recipient check failed");
                        Err(())
                    }
                };
                session.recipient_checked(&address, outcome)
            }
            Action::Admit(size) => {
                reserved = ctx.memory.try_reserve(memory::cost(size, ctx.db.backend()));
                session.admitted(reserved.is_some())
            }
            Action::Quit(r) => {
                close_with(&mut rd, &mut out, r, idle).await?;
                return Ok(Outcome::Closed);
            }
            Action::StartTls(r) => {
                out.extend_from_slice(r.to_wire().as_bytes());
                write_out(rd.get_mut(), &mut out, idle).await?;
                // `into_inner` drops anything pipelined after STARTTLS: plain
                // text must never be taken as part of the TLS session.
                return Ok(Outcome::Upgrade(rd.into_inner()));
            }
            Action::StartData(r) => {
                // From here until the message is answered the session is
                // not evicted; if it was just now, it closes instead.
                if !ctx.slot.enter_data() {
                    close_with(&mut rd, &mut out, evicted_reply(&config), EVICTED_CLOSE).await?;
                    return Ok(Outcome::Closed);
                }
                out.extend_from_slice(r.to_wire().as_bytes());
                write_out(rd.get_mut(), &mut out, idle).await?;
                let expected = session.declared_size().unwrap_or(0);
                let envelope = session.take_envelope();
                let session_id = crate::ids::random_token(12);
                // The trace fields go in front of the message as it is read:
                // no copy of the whole message to prepend them afterwards.
                let trace = trace_headers(&config, session, peer, &envelope, &session_id);
                let trace_len = trace.len();
                let reservation = reserved.take().unwrap_or_else(|| ctx.memory.empty());
                let reading =
                    DataReader::with_prefix(config.max_message_size, trace.into_bytes(), expected);
                let backend = ctx.db.backend();
                let deadline = ctx.deadline;
                match read_data(
                    &mut rd,
                    &mut line,
                    &config,
                    reading,
                    reservation,
                    backend,
                    deadline,
                )
                .await?
                {
                    DataEnd::Message(raw, reservation) => {
                        let reply = deliver(ctx, peer, envelope, raw, trace_len).await;
                        drop(reservation);
                        config.metrics.smtp_message(ReplyClass::of(reply.code));
                        reply
                    }
                    DataEnd::Refused(reply) => {
                        config.metrics.smtp_message(ReplyClass::of(reply.code));
                        reply
                    }
                    DataEnd::Close(reply) => {
                        config.metrics.smtp_message(ReplyClass::of(reply.code));
                        close_with(&mut rd, &mut out, reply, idle).await?;
                        return Ok(Outcome::Closed);
                    }
                    DataEnd::Eof => return Ok(Outcome::Closed),
                }
            }
        };
        if !session.in_transaction() {
            reserved = None;
        }
        ctx.slot.report(progress_of(session));
        if reply.is_permanent_error() {
            *errors += 1;
        }
        out.extend_from_slice(reply.to_wire().as_bytes());
        if *errors >= config.max_errors {
            let bye = Reply::new(421, "4.7.0 Error: too many errors, closing connection");
            close_with(&mut rd, &mut out, bye, idle).await?;
            return Ok(Outcome::Closed);
        }
    }
}

enum DataEnd {
    /// The message, and its share of the memory budget (held until stored).
    Message(Vec<u8>, Reservation),
    /// Read to the end, but refused (too big, a line too long).
    Refused(Reply),
    /// Give up on the connection with this reply.
    Close(Reply),
    Eof,
}

/// Reads the message into `data`, growing `reserved` to cover what
/// processing it will cost, stored on `backend`.
async fn read_data<R: AsyncBufReadExt + Unpin>(
    rd: &mut R,
    line: &mut Vec<u8>,
    config: &SmtpConfig,
    mut data: DataReader,
    mut reserved: Reservation,
    backend: Backend,
    deadline: Instant,
) -> io::Result<DataEnd> {
    // Past the limit the rest is read and dropped, up to this much.
    let hard_cap = config.max_message_size.saturating_mul(2);
    let timed_out = || DataEnd::Close(timeout_reply(config, deadline));
    let too_big = || {
        DataEnd::Close(Reply::new(
            552,
            "5.3.4 Error: message exceeds fixed maximum message size",
        ))
    };
    loop {
        if Instant::now() >= deadline {
            return Ok(timed_out());
        }
        let Ok(read) = timeout_at(
            read_deadline(config, deadline),
            read_line(rd, line, config.max_line_length),
        )
        .await
        else {
            return Ok(timed_out());
        };
        match read? {
            LineRead::Eof => return Ok(DataEnd::Eof),
            LineRead::Line { bare_lf } => {
                if data.push_line(line, bare_lf) == DataStep::End {
                    break;
                }
                // Reserve memory as the message grows past what was
                // reserved; none left means 452 (never waiting for it, so
                // sessions cannot deadlock). The rest is read and dropped.
                let cost = memory::cost(data.buffered(), backend);
                if cost > reserved.bytes() && !reserved.try_grow_to(cost) {
                    data.out_of_memory();
                    reserved.release();
                }
            }
            LineRead::TooLong => {
                let budget = hard_cap.saturating_sub(data.received() + line.len());
                let Ok(skipped) = timeout_at(
                    read_deadline(config, deadline),
                    discard_line(rd, line.last().copied(), budget),
                )
                .await
                else {
                    return Ok(timed_out());
                };
                match skipped? {
                    Some((n, bare_lf)) => data.note_long_line(line.len() + n, bare_lf),
                    None => return Ok(too_big()),
                }
            }
        }
        if data.received() > hard_cap {
            return Ok(too_big());
        }
    }
    Ok(match data.finish() {
        Ok(raw) => DataEnd::Message(raw, reserved),
        Err(reply) => DataEnd::Refused(reply),
    })
}

fn header_safe(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']' | '@' | '+')
        })
        .take(max)
        .collect()
}

/// The trace headers this hop adds (RFC 5321 §4.4).
fn trace_headers(
    config: &SmtpConfig,
    session: &Session,
    peer: SocketAddr,
    envelope: &Envelope,
    id: &str,
) -> String {
    let protocol = match (session.is_esmtp(), session.tls_active) {
        (true, true) => "ESMTPS",
        (true, false) => "ESMTP",
        (false, true) => "SMTPS",
        (false, false) => "SMTP",
    };
    let date = OffsetDateTime::now_utc()
        .format(&Rfc2822)
        .unwrap_or_default();
    let mut h = format!(
        "Return-Path: <{}>\r\n",
        envelope
            .mail_from
            .chars()
            .filter(|c| !c.is_control() && *c != '<' && *c != '>')
            .collect::<String>()
    );
    h.push_str(&format!(
        "Received: from {} ({})\r\n\tby {} (Pigeonhole) with {} id {}",
        header_safe(&envelope.helo, 255),
        peer.ip(),
        config.hostname,
        protocol,
        id
    ));
    if let [only] = envelope.recipients.as_slice() {
        h.push_str(&format!("\r\n\tfor <{}>", header_safe(only, 254)));
    }
    h.push_str(&format!(";\r\n\t{date}\r\n"));
    h
}

/// Checks the sender, puts our `Authentication-Results` after this hop's
/// trace fields (the first `trace_len` bytes of `raw`) and stores the
/// message; the reply says whether it was.
async fn deliver(
    ctx: &mut Ctx,
    peer: SocketAddr,
    envelope: Envelope,
    mut raw: Vec<u8>,
    trace_len: usize,
) -> Reply {
    let config = ctx.config.clone();
    let origin = Origin {
        ip: peer.ip(),
        helo: &envelope.helo,
        mail_from: &envelope.mail_from,
    };
    let results = inbound_auth::authenticate(
        &ctx.dns,
        &mut ctx.auth_memo,
        origin,
        &mut raw,
        trace_len,
        &config.hostname,
        config.auth_timeout,
    )
    .await;
    raw.splice(trace_len..trace_len, results.into_bytes());
    let decided = std::mem::take(&mut ctx.decided);
    match inbound::ingest(&ctx.db, raw.into(), &envelope.recipients, &decided).await {
        Ok(stored) if stored.is_empty() => Reply::new(
            550,
            "5.1.1 Error: no recipient of this message exists any more",
        ),
        Ok(stored) => {
            let ids: Vec<&str> = stored.iter().map(|s| s.id.as_str()).collect();
            tracing::info!(
                peer = %peer,
                from = %envelope.mail_from,
                recipients = envelope.recipients.len(),
                messages = ?ids,
                duplicates = stored.iter().filter(|s| s.duplicate).count(),
                "smtp message stored"
            );
            Reply::new(250, format!("2.0.0 Ok: stored as {}", ids.join(" ")))
        }
        Err(e) => {
            tracing::error!(peer = %peer, error = %e, "smtp message could not be stored");
            Reply::new(451, "4.3.0 Error: local storage failure, try again later")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_split_across_reads_and_limits() {
        let input: &[u8] = b"EHLO a\r\nNOOP\nxxxxxxxxxxxxxxxxxxxx\r\nyyyyyyyyyyyyyyyyyyy\nlast";
        let mut rd = tokio::io::BufReader::with_capacity(3, input);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut rd, &mut line, 10).await.unwrap(),
            LineRead::Line { bare_lf: false }
        );
        assert_eq!(line, b"EHLO a");
        assert_eq!(
            read_line(&mut rd, &mut line, 10).await.unwrap(),
            LineRead::Line { bare_lf: true }
        );
        assert_eq!(line, b"NOOP");
        assert_eq!(
            read_line(&mut rd, &mut line, 10).await.unwrap(),
            LineRead::TooLong
        );
        let (skipped, bare_lf) = discard_line(&mut rd, line.last().copied(), 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((line.len() + skipped, bare_lf), (22, false));
        assert_eq!(
            read_line(&mut rd, &mut line, 10).await.unwrap(),
            LineRead::TooLong
        );
        let (skipped, bare_lf) = discard_line(&mut rd, line.last().copied(), 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((line.len() + skipped, bare_lf), (20, true));
        // A final line without a line ending is not a command.
        assert_eq!(
            read_line(&mut rd, &mut line, 10).await.unwrap(),
            LineRead::Eof
        );
    }

    #[tokio::test]
    async fn a_cr_read_before_the_skip_still_counts() {
        // The CR was the last byte of the part already read.
        let mut rd = tokio::io::BufReader::new(&b"\nnext"[..]);
        assert_eq!(
            discard_line(&mut rd, Some(b'\r'), 100).await.unwrap(),
            Some((1, false))
        );
        let mut rd = tokio::io::BufReader::new(&b"\nnext"[..]);
        assert_eq!(
            discard_line(&mut rd, Some(b'x'), 100).await.unwrap(),
            Some((1, true))
        );
    }

    #[test]
    fn trace_headers_are_sanitised() {
        let config = SmtpConfig {
            hostname: "mx.test".into(),
            ..SmtpConfig::default()
        };
        let mut session = Session::new(config.limits());
        session.handle(parse_command(b"EHLO evil\x01host"));
        let env = Envelope {
            helo: "evil\u{1}host (fake)".into(),
            mail_from: "a@x.test".into(),
            recipients: vec!["b@y.test".into()],
        };
        let h = trace_headers(
            &config,
            &session,
            "127.0.0.1:25".parse().unwrap(),
            &env,
            "id1",
        );
        assert!(h.starts_with("Return-Path: <a@x.test>\r\nReceived: from evilhostfake (127.0.0.1)\r\n\tby mx.test (Pigeonhole) with ESMTP id id1\r\n\tfor <b@y.test>;\r\n\t"), "{h}");
        assert!(h.ends_with("\r\n"));
        let p = crate::core::inbound::parse(&format!("{h}Subject: x\r\n\r\nbody\r\n").into());
        assert_eq!(p.subject, "x");
    }
}
