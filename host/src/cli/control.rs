//! The control socket (S118): the process that holds a home serves the commands of every other
//! `weft` process on that home through a Unix domain socket inside it.
//!
//! Protocol: the client sends one JSON line, `{"cmd": Cmd, "terminal": bool}` (the
//! [`Cmd`](super::Cmd), and whether the client's stderr is a terminal); the server answers with
//! JSON lines: `"accepted"` once it has taken the command, `{"started": run_id}` once the
//! command's run is stored, `{"out": text}` / `{"err": text}`, for a client on a terminal
//! `{"event": StoredEvent}` (the client draws the live display itself), and finally
//! `{"exit": code}`.
//! A client that hears nothing may open the home itself; one whose server dies after taking
//! its command never runs it again (that could run it twice).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, mpsc};

use super::live::Live;
use super::{Cmd, Output, exec};
use crate::driver::{Runtime, StoredEvent};

/// The socket's file name inside the home.
pub(super) const SOCKET: &str = "control.sock";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Frame {
    Accepted,
    Started(String),
    Out(String),
    /// A piece of a stderr line (streamed model text).
    ErrPart(String),
    Err(String),
    /// An event of the command's run, for the client's live display.
    Event(Box<StoredEvent>),
    Exit(i32),
}

/// What a client asks: its command, and whether it can draw a live display.
#[derive(Serialize, Deserialize)]
struct Request {
    cmd: Cmd,
    #[serde(default)]
    terminal: bool,
}

/// Stops serving when dropped.
pub(super) struct Server {
    task: tokio::task::JoinHandle<()>,
    path: PathBuf,
    clients: Arc<Clients>,
}

/// The connections being served.
#[derive(Default)]
struct Clients {
    active: AtomicUsize,
    idle: Notify,
}

/// Counts one connection while it is served.
struct Served(Arc<Clients>);

impl Drop for Served {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Server {
    /// Waits until no client is being served, still taking new ones meanwhile, then stops: a
    /// holder whose own command ended never cuts another terminal's command off.
    pub(super) async fn finish(self, out: &mut dyn Output) {
        let mut told = false;
        loop {
            let idle = self.clients.idle.notified();
            let active = self.clients.active.load(Ordering::SeqCst);
            if active == 0 {
                return;
            }
            if !told {
                out.err(&format!(
                    "waiting for {active} command(s) of other weft processes served by this one"
                ));
                told = true;
            }
            idle.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves the control socket of `rt`'s home. This process holds the home, so a socket file
/// that is there already was left by a dead process and is replaced.
pub(super) fn serve(rt: Runtime) -> Option<Server> {
    let path = rt.home().join(SOCKET);
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path).and_then(|l| {
        crate::home::restrict_file(&path)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("cannot serve the control socket {}: {e}", path.display());
            return None;
        }
    };
    let clients = Arc::new(Clients::default());
    let counted = clients.clone();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.active.fetch_add(1, Ordering::SeqCst);
            let served = Served(counted.clone());
            let rt = rt.clone();
            tokio::spawn(async move {
                handle(rt, stream).await;
                drop(served);
            });
        }
    });
    Some(Server {
        task,
        path,
        clients,
    })
}

/// A client's output, sent as frames; `terminal` when the client draws a live display.
struct Remote {
    frames: mpsc::UnboundedSender<Frame>,
    terminal: bool,
}

impl Output for Remote {
    fn line(&mut self, text: &str) {
        let _ = self.frames.send(Frame::Out(text.to_owned()));
    }

    fn err(&mut self, text: &str) {
        let _ = self.frames.send(Frame::Err(text.to_owned()));
    }

    fn err_part(&mut self, text: &str) {
        let _ = self.frames.send(Frame::ErrPart(text.to_owned()));
    }

    fn started(&mut self, run_id: &str) {
        let _ = self.frames.send(Frame::Started(run_id.to_owned()));
    }

    fn terminal(&self) -> bool {
        self.terminal
    }

    fn live_elsewhere(&mut self, ev: &StoredEvent) -> bool {
        let _ = self.frames.send(Frame::Event(Box::new(ev.clone())));
        true
    }
}

async fn handle(rt: Runtime, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let Ok(Some(request)) = lines.next_line().await else {
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let request: Result<Request, _> = serde_json::from_str(&request);
    tokio::spawn(async move {
        let code = match request {
            Ok(Request { cmd, terminal }) => {
                let _ = tx.send(Frame::Accepted);
                let mut out = Remote {
                    frames: tx.clone(),
                    terminal,
                };
                exec(&rt, cmd, &mut out).await
            }
            Err(e) => {
                let _ = tx.send(Frame::Err(format!("error: bad control request: {e}")));
                super::EXIT_USAGE
            }
        };
        let _ = tx.send(Frame::Exit(code));
    });
    while let Some(frame) = rx.recv().await {
        let Ok(mut text) = serde_json::to_string(&frame) else {
            continue;
        };
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() {
            return;
        }
        if matches!(frame, Frame::Exit(_)) {
            return;
        }
    }
}

/// Sends `cmd` to the process holding `home`; its exit code, or `None` when no live process
/// answers on the socket.
pub(super) async fn forward(home: &Path, cmd: &Cmd, out: &mut dyn Output) -> Option<i32> {
    let stream = UnixStream::connect(home.join(SOCKET)).await.ok()?;
    let (read, mut write) = stream.into_split();
    let terminal = out.terminal();
    let mut request = serde_json::to_string(&Request {
        cmd: cmd.clone(),
        terminal,
    })
    .ok()?;
    request.push('\n');
    write.write_all(request.as_bytes()).await.ok()?;
    let mut lines = BufReader::new(read).lines();
    let mut accepted = false;
    let mut started = match cmd {
        Cmd::Resume(resume) => Some(resume.run_id.clone()),
        _ => None,
    };
    // The live display of the command's run, drawn here from the events the holder sends.
    let mut live: Option<Live> = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let frame = serde_json::from_str::<Frame>(&line);
        if let Ok(Frame::Event(ev)) = &frame {
            live.get_or_insert_with(Live::new).show(ev);
            continue;
        }
        if let Some(display) = live.take() {
            display.finish();
        }
        match frame {
            Ok(Frame::Event(_)) => {}
            Ok(Frame::Accepted) => accepted = true,
            Ok(Frame::Started(id)) => started = Some(id),
            Ok(Frame::Out(t)) => out.line(&t),
            Ok(Frame::Err(t)) => out.err(&t),
            Ok(Frame::ErrPart(t)) => out.err_part(&t),
            Ok(Frame::Exit(code)) => return Some(code),
            Err(_) => continue,
        }
    }
    if !accepted {
        // The holder stopped before taking the command: the caller may try the home again.
        return None;
    }
    let holder = format!("the weft process holding home {} stopped", home.display());
    match (cmd, started) {
        (Cmd::Run(_) | Cmd::Resume(_), Some(id)) => {
            out.err(&format!(
                "error: {holder} before run {id} ended or suspended. The run is stored: go on with `weft resume {id}`"
            ));
            Some(super::EXIT_INTERRUPTED)
        }
        (Cmd::Run(_), None) => {
            out.err(&format!(
                "error: {holder} after taking this command, before it reported a run. If it stored one, `weft runs` lists it, and `weft resume RUN-ID` goes on with it"
            ));
            Some(super::EXIT_INTERRUPTED)
        }
        _ => {
            out.err(&format!("error: {holder} before answering; try again"));
            Some(super::EXIT_USAGE)
        }
    }
}
