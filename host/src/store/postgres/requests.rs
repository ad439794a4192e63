//! Requests and notifications: resumes and cancels handed to the process driving a run
//! (`requests`, with their answers), and the LISTEN/NOTIFY connection that wakes watchers,
//! workers and askers.

use std::sync::Arc;

use tokio::sync::broadcast;
use tokio_postgres::NoTls;

use super::connect::{FIRST_BACKOFF, MAX_BACKOFF};
use super::{Notice, PgStore, Request, Sql, StoreError};

impl PgStore {
    /// Hands `body` to `worker` and wakes it (`SharedStore::send_request`).
    pub(super) fn insert_request(
        &self,
        run_id: &str,
        worker: &str,
        body: &str,
    ) -> Result<i64, StoreError> {
        self.call("hand a request over", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_one(
                        &sql.q(
                            "WITH r AS (INSERT INTO {s}.requests (run_id, worker, body) \
                               VALUES ($1, $2, $3) RETURNING id) \
                             SELECT id, pg_notify($4, $2) FROM r",
                        ),
                        &[&run_id, &worker, &body, &sql.requests],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0))
            }
        })
    }

    /// Marks the requests handed to this process taken and returns them
    /// (`SharedStore::take_requests`).
    pub(super) fn take_our_requests(&self) -> Result<Vec<Request>, StoreError> {
        self.call("take requests", |c| {
            let sql = &self.sql;
            async move {
                let rows = c
                    .query(
                        &sql.q("UPDATE {s}.requests SET taken = true \
                             WHERE worker = $1 AND NOT taken RETURNING id, run_id, body"),
                        &[&self.worker],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| Request {
                        id: r.get(0),
                        run_id: r.get(1),
                        body: r.get(2),
                    })
                    .collect())
            }
        })
    }

    /// Stores the answer to request `id` and wakes its asker (`SharedStore::answer`).
    pub(super) fn answer_request(&self, id: i64, answer: &str) -> Result<(), StoreError> {
        self.call("answer a request", |c| {
            let sql = &self.sql;
            async move {
                c.query(
                    &sql.q(
                        "WITH r AS (UPDATE {s}.requests SET answer = $2 WHERE id = $1 RETURNING id) \
                         SELECT pg_notify($3, id::text) FROM r",
                    ),
                    &[&id, &answer, &sql.answers],
                )
                .await?;
                Ok(())
            }
        })
    }

    /// Removes request `id` once answered, returning its answer (`SharedStore::answer_of`).
    pub(super) fn take_answer(&self, id: i64) -> Result<Option<String>, StoreError> {
        self.call("read an answer", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q(
                            "DELETE FROM {s}.requests WHERE id = $1 AND answer IS NOT NULL \
                             RETURNING answer",
                        ),
                        &[&id],
                    )
                    .await?;
                Ok(row.map(|r| r.get(0)))
            }
        })
    }

    /// Removes request `id` unless taken already (`SharedStore::withdraw`).
    pub(super) fn withdraw_request(&self, id: i64) -> Result<bool, StoreError> {
        self.call("withdraw a request", |c| {
            let sql = &self.sql;
            async move {
                let n = c
                    .execute(
                        &sql.q("DELETE FROM {s}.requests WHERE id = $1 AND NOT taken"),
                        &[&id],
                    )
                    .await?;
                Ok(n == 1)
            }
        })
    }
}

/// Follows the store's notification channels on a connection of its own, again after every
/// loss of it, telling [`Notice::Reconnected`] each time (notifications may have been missed).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    sql: Arc<Sql>,
    worker: String,
    notices: broadcast::Sender<Notice>,
) {
    use futures::StreamExt;
    let mut pause = FIRST_BACKOFF;
    loop {
        let (client, mut connection) = match config.connect(NoTls).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("postgres: cannot listen for notifications: {e}; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let (tx, mut messages) = futures::channel::mpsc::unbounded();
        let driver = tokio::spawn(async move {
            let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = stream.next().await {
                if tx.unbounded_send(message).is_err() {
                    break;
                }
            }
        });
        let listened = client
            .batch_execute(&format!(
                "LISTEN \"{}\"; LISTEN \"{}\"; LISTEN \"{}\"; LISTEN \"{}\"",
                sql.events, sql.requests, sql.answers, sql.work
            ))
            .await;
        if let Err(e) = listened {
            tracing::warn!("postgres: LISTEN failed: {e}; trying again");
            driver.abort();
            tokio::time::sleep(pause).await;
            continue;
        }
        pause = FIRST_BACKOFF;
        let _ = notices.send(Notice::Reconnected);
        while let Some(message) = messages.next().await {
            let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message else {
                if message.is_err() {
                    break;
                }
                continue;
            };
            let notice = if n.channel() == sql.events {
                Notice::Records(n.payload().to_owned())
            } else if n.channel() == sql.requests {
                if n.payload() != worker {
                    continue;
                }
                Notice::Request
            } else if n.channel() == sql.answers {
                match n.payload().parse() {
                    Ok(id) => Notice::Answer(id),
                    Err(_) => continue,
                }
            } else {
                Notice::Work
            };
            let _ = notices.send(notice);
        }
        driver.abort();
        drop(client);
        tracing::warn!("postgres: the notification connection was lost; reconnecting");
    }
}
