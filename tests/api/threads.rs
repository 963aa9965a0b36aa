use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, spawn_app};
use pigeonhole::sql;
use pigeonhole::store::RowExt;

async fn setup() -> TestApp {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app
}

async fn send(app: &TestApp, body: Value) -> Value {
    let r = app.post("/api/v1/emails", body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.body
}

fn ids(r: &Value) -> Vec<String> {
    r["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn list_shows_threads_newest_first_with_their_fields() {
    let app = setup().await;
    let a = send(&app, json!({"from": "Team <team@example.com>", "to": "Ann <ann@x.com>", "subject": "Quarterly numbers", "text": "See the attached numbers", "attachments": [{"filename": "q.csv", "content": "YSxi"}]})).await;
    let b = send(&app, json!({"from": "team@example.com", "to": "bob@x.com", "subject": "Lunch?", "text": "Pizza at noon"})).await;
    let r = app.get("/api/v1/threads").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        ids(&r.body),
        vec![
            b["thread_id"].as_str().unwrap(),
            a["thread_id"].as_str().unwrap()
        ]
    );
    let t = &r.body["data"][1];
    assert_eq!(t["object"], "thread");
    assert_eq!(t["mailbox"], "team@example.com");
    assert_eq!(t["subject"], "Quarterly numbers");
    assert_eq!(t["snippet"], "See the attached numbers");
    assert_eq!(t["folders"], json!(["sent"]));
    assert_eq!(t["message_count"], 1);
    assert_eq!(t["unread_count"], 0);
    assert_eq!(t["is_starred"], false);
    assert_eq!(t["has_attachments"], true);
    assert_eq!(t["labels"], json!([]));
    let people: Vec<_> = t["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["address"].clone())
        .collect();
    assert_eq!(people, vec![json!("team@example.com"), json!("ann@x.com")]);

    let count = |q: &'static str| {
        let app = &app;
        async move {
            let r = app.get(&format!("/api/v1/threads?{q}")).await;
            assert_eq!(r.status, 200, "{q}: {}", r.text);
            r.body["data"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("folder=sent").await, 2);
    assert_eq!(count("folder=inbox").await, 0);
    assert_eq!(count("folder=all").await, 2);
    assert_eq!(count("has_attachments=true").await, 1);
    assert_eq!(count("participant=bob@x.com").await, 1);
    assert_eq!(count("subject=quarterly").await, 1);
    assert_eq!(count("q=pizza").await, 1);
    assert_eq!(count("q=numbers").await, 1);
    assert_eq!(count("since=2000-01-01").await, 2);
    assert_eq!(count("until=2000-01-01").await, 0);
    assert_eq!(count("mailbox=team@example.com").await, 2);
    assert_eq!(count("domain=other.org").await, 0);
    assert_eq!(count("limit=1").await, 1);
    for bad in [
        "folder=nowhere",
        "starred=perhaps",
        "cursor=xyz",
        "limit=500",
    ] {
        assert_error(
            &app.get(&format!("/api/v1/threads?{bad}")).await,
            422,
            "invalid_request",
        );
    }
    // Paging through.
    let first = app.get("/api/v1/threads?limit=1").await.body;
    assert_eq!(first["has_more"], true);
    let next = app
        .get(&format!(
            "/api/v1/threads?limit=1&cursor={}",
            first["next_cursor"].as_str().unwrap()
        ))
        .await
        .body;
    assert_eq!(ids(&next), vec![a["thread_id"].as_str().unwrap()]);
    assert_eq!(next["has_more"], false);
}

#[tokio::test]
async fn single_read_has_every_message_and_a_light_form() {
    let app = setup().await;
    let a = send(&app, json!({"from": "team@example.com", "to": "ann@x.com", "subject": "Hi", "text": "one", "html": "<p>one</p>"})).await;
    send(&app, json!({"from": "team@example.com", "to": "ann@x.com", "text": "two", "thread_id": a["thread_id"]})).await;
    let path = format!("/api/v1/threads/{}", a["thread_id"].as_str().unwrap());
    let t = app.get(&path).await.body;
    assert_eq!(t["message_count"], 2);
    let msgs = t["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["text"], "one");
    assert!(msgs[0]["attachments"].is_array());
    let light = app.get(&format!("{path}?include_body=false")).await.body;
    assert!(light["messages"][0].get("text").is_none());
    assert_error(&app.get("/api/v1/threads/thr_nope").await, 404, "not_found");
}

#[tokio::test]
async fn patch_moves_stars_reads_and_labels_atomically() {
    let app = setup().await;
    let a = send(
        &app,
        json!({"from": "team@example.com", "to": "ann@x.com", "subject": "Hi", "text": "one"}),
    )
    .await;
    let tid = a["thread_id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/threads/{tid}");
    let urgent = app
        .post(
            "/api/v1/labels",
            json!({"name": "Urgent", "color": "#FF0000"}),
        )
        .await;
    assert_eq!(urgent.status, 201, "{}", urgent.text);
    assert_eq!(urgent.body["color"], "#ff0000");
    let later = app
        .post("/api/v1/labels", json!({"name": "Later"}))
        .await
        .body;
    assert_eq!(later["color"], "#9ca3af");

    // An unknown label: 422 and nothing changes, not even the star.
    let r = app
        .patch(
            &path,
            json!({"is_starred": true, "add_labels": ["Urgent", "Nope"]}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "add_labels[1]");
    let t = app.get(&path).await.body;
    assert_eq!(t["is_starred"], false);
    assert_eq!(t["labels"], json!([]));

    let r = app
        .patch(
            &path,
            json!({"is_starred": true, "add_labels": ["urgent", later["id"]], "folder": "archive"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["is_starred"], true);
    assert_eq!(r.body["folders"], json!(["archive"]));
    let names: Vec<_> = r.body["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("Later"), json!("Urgent")]);
    assert_eq!(r.body["labels"][0]["object"], "label");
    assert_eq!(
        app.get("/api/v1/threads?label=Urgent").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.get(&format!(
            "/api/v1/threads?label_id={}",
            later["id"].as_str().unwrap()
        ))
        .await
        .body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.get("/api/v1/threads?starred=true").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.get("/api/v1/threads?folder=archive").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.get("/api/v1/threads").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let r = app
        .patch(&path, json!({"remove_labels": ["Later"], "is_read": false}))
        .await;
    assert_eq!(r.body["labels"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["unread_count"], 1);
    assert_eq!(
        app.get("/api/v1/threads?unread=true").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = app.patch(&path, json!({"is_read": true})).await;
    assert_eq!(r.body["unread_count"], 0);
    assert_error(
        &app.patch(&path, json!({"folder": "elsewhere"})).await,
        422,
        "invalid_request",
    );

    // Each change wrote thread.updated with the thread.
    let rows = sql!("SELECT payload FROM events WHERE type = 'thread.updated' ORDER BY seq")
        .fetch_all(app.db.reader())
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let payload: Value = serde_json::from_str(&rows[0].text("payload").unwrap()).unwrap();
    assert_eq!(payload["data"]["thread"]["id"], tid.as_str());

    // A deleted label leaves every thread.
    assert_eq!(app.delete("/api/v1/labels/Urgent").await.status, 200);
    assert_eq!(app.get(&path).await.body["labels"], json!([]));
    assert_error(&app.get("/api/v1/labels/Urgent").await, 404, "not_found");
}

#[tokio::test]
async fn delete_goes_through_trash_unless_permanent() {
    let app = setup().await;
    let a = send(
        &app,
        json!({"from": "team@example.com", "to": "ann@x.com", "subject": "A", "text": "one"}),
    )
    .await;
    let b = send(
        &app,
        json!({"from": "team@example.com", "to": "ann@x.com", "subject": "B", "text": "two"}),
    )
    .await;
    let pa = format!("/api/v1/threads/{}", a["thread_id"].as_str().unwrap());
    let r = app.delete(&pa).await;
    assert_eq!(
        r.body,
        json!({"object": "thread", "id": a["thread_id"], "deleted": true, "permanent": false})
    );
    assert_eq!(app.get(&pa).await.body["folders"], json!(["trash"]));
    assert_eq!(
        app.get("/api/v1/threads").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.get("/api/v1/threads?folder=trash").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = app.delete(&pa).await;
    assert_eq!(r.body["permanent"], true);
    assert_error(&app.get(&pa).await, 404, "not_found");
    assert_error(
        &app.get(&format!("/api/v1/emails/{}", a["id"].as_str().unwrap()))
            .await,
        404,
        "not_found",
    );

    let pb = format!(
        "/api/v1/threads/{}?permanent=true",
        b["thread_id"].as_str().unwrap()
    );
    assert_eq!(app.delete(&pb).await.body["permanent"], true);
    assert_eq!(
        app.get("/api/v1/threads?folder=trash").await.body["data"],
        json!([])
    );
    assert_eq!(
        app.get("/api/v1/emails?q=two").await.body["data"],
        json!([])
    );
}

#[tokio::test]
async fn replies_answer_the_last_message_with_quote_and_threading_headers() {
    let app = setup().await;
    let a = send(&app, json!({"from": "team@example.com", "to": ["ann@x.com"], "cc": "carl@x.com", "subject": "Plans", "text": "Shall we meet?", "html": "<p>Shall we meet?</p>"})).await;
    let tid = a["thread_id"].as_str().unwrap();
    let r = app
        .post(
            &format!("/api/v1/threads/{tid}/reply"),
            json!({"text": "Following up.", "html": "<p>Following up.</p>", "reply_all": true}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["thread_id"], tid);
    // Our own message was last: its recipients are answered, never ourselves.
    assert_eq!(r.body["to"], json!(["ann@x.com"]));
    assert_eq!(r.body["subject"], "Re: Plans");
    let m = app
        .get(&format!(
            "/api/v1/emails/{}",
            r.body["id"].as_str().unwrap()
        ))
        .await
        .body;
    assert_eq!(m["in_reply_to"], a["message_id"]);
    assert_eq!(m["references"], a["message_id"]);
    assert_eq!(m["cc"], json!(["carl@x.com"]));
    let text = m["text"].as_str().unwrap();
    assert!(text.starts_with("Following up.\n\nOn "), "{text}");
    assert!(
        text.contains("team@example.com wrote:\n> Shall we meet?"),
        "{text}"
    );
    assert!(m["html"].as_str().unwrap().contains("<blockquote"));

    let r = app
        .post(
            &format!("/api/v1/threads/{tid}/reply"),
            json!({"text": "All of you", "quote": false, "subject": "Custom"}),
        )
        .await;
    let m = app
        .get(&format!(
            "/api/v1/emails/{}",
            r.body["id"].as_str().unwrap()
        ))
        .await
        .body;
    assert_eq!(m["cc"], json!([]));
    assert_eq!(m["to"], json!(["ann@x.com"]));
    assert_eq!(m["text"], "All of you");
    assert_eq!(m["subject"], "Custom");

    let r = app
        .post(
            &format!("/api/v1/threads/{tid}/reply"),
            json!({"text": "x", "to": "dora@x.com"}),
        )
        .await;
    assert_eq!(r.body["to"], json!(["dora@x.com"]));
    assert_error(
        &app.post(&format!("/api/v1/threads/{tid}/reply"), json!({}))
            .await,
        422,
        "invalid_request",
    );
    assert_error(
        &app.post("/api/v1/threads/thr_nope/reply", json!({"text": "x"}))
            .await,
        404,
        "not_found",
    );
    assert_eq!(
        app.get(&format!("/api/v1/threads/{tid}")).await.body["message_count"],
        4
    );
}

#[tokio::test]
async fn threads_and_labels_respect_reach_and_scopes() {
    let app = setup().await;
    app.verified_domain("other.org").await;
    send(
        &app,
        json!({"from": "team@example.com", "to": "ann@x.com", "text": "one"}),
    )
    .await;
    let o = send(
        &app,
        json!({"from": "ops@other.org", "to": "ann@x.com", "text": "two"}),
    )
    .await;
    let k = app.new_key(None, Some("other.org"), None, None).await;
    let r = app.call("GET", "/api/v1/threads", Some(&k.key), None).await;
    assert_eq!(ids(&r.body), vec![o["thread_id"].as_str().unwrap()]);
    let mine = app
        .get("/api/v1/threads?mailbox=team@example.com")
        .await
        .body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_error(
        &app.call(
            "GET",
            &format!("/api/v1/threads/{mine}"),
            Some(&k.key),
            None,
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        &app.call(
            "DELETE",
            &format!("/api/v1/threads/{mine}"),
            Some(&k.key),
            None,
        )
        .await,
        404,
        "not_found",
    );
    let ro = app.new_key(Some("mail:read"), None, None, None).await;
    let r = app
        .call(
            "PATCH",
            &format!("/api/v1/threads/{mine}"),
            Some(&ro.key),
            Some(json!({"is_starred": true})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    assert_eq!(r.body["required_scope"], "mail:write");
    app.post("/api/v1/labels", json!({"name": "Team"})).await;
    assert_error(
        &app.post("/api/v1/labels", json!({"name": "team"})).await,
        409,
        "conflict",
    );
    assert_error(
        &app.post("/api/v1/labels", json!({"name": "x".repeat(61)}))
            .await,
        422,
        "invalid_request",
    );
    let r = app
        .call(
            "PATCH",
            "/api/v1/labels/Team",
            Some(&k.key),
            Some(json!({"name": "Mine"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    let r = app
        .patch(
            "/api/v1/labels/Team",
            json!({"name": "Crew", "color": "#00ff00"}),
        )
        .await;
    assert_eq!(r.body["name"], "Crew");
    assert_eq!(
        app.get("/api/v1/labels").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

async fn found(app: &TestApp, q: &str) -> Vec<String> {
    let r = app.get(&format!("/api/v1/threads?q={q}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    ids(&r.body)
}

/// A search's threads, one page at a time.
async fn every_page(app: &TestApp, q: &str) -> Vec<String> {
    let mut all = Vec::new();
    let mut path = format!("/api/v1/threads?q={q}&limit=1");
    loop {
        let r = app.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        all.extend(ids(&r.body));
        match r.body["next_cursor"].as_str() {
            Some(c) => path = format!("/api/v1/threads?q={q}&limit=1&cursor={c}"),
            None => return all,
        }
    }
}

/// A thread search orders threads by their last message and pages through
/// them; a reply moves a thread up, a deletion takes it out. On SQLite the
/// thread index behind it stays one document per thread, and rebuilding it
/// from scratch (as the migration does) gives the same answers.
#[tokio::test]
async fn thread_search_follows_replies_pages_and_deletions() {
    use pigeonhole::core::search;
    use pigeonhole::store::Backend;

    let app = setup().await;
    let first = send(&app, json!({"from": "team@example.com", "to": "ann@x.com", "subject": "Harbour plans", "text": "The ferry leaves at nine"})).await;
    send(&app, json!({"from": "team@example.com", "to": "bob@x.com", "subject": "Budget", "text": "Numbers only"})).await;
    let third = send(&app, json!({"from": "team@example.com", "to": "cy@x.com", "subject": "Ferry tickets", "text": "Booked"})).await;
    let fourth = send(&app, json!({"from": "team@example.com", "to": "dee@x.com", "subject": "Lunch", "text": "A ferry ride"})).await;
    let thread = |v: &Value| v["thread_id"].as_str().unwrap().to_string();
    assert_eq!(
        found(&app, "ferry").await,
        [thread(&fourth), thread(&third), thread(&first)]
    );

    // A reply to the oldest moves it first, and its words join the thread.
    let reply = send(&app, json!({"from": "team@example.com", "to": "ann@x.com", "subject": "Re: Harbour plans", "text": "Moved to ten", "in_reply_to": first["message_id"]})).await;
    assert_eq!(reply["thread_id"], first["thread_id"]);
    let expected = vec![thread(&first), thread(&fourth), thread(&third)];
    assert_eq!(found(&app, "ferry").await, expected);
    assert_eq!(found(&app, "moved+ten").await, [thread(&first)]);
    // Words may be in different messages of the thread.
    assert_eq!(found(&app, "ferry+moved").await, [thread(&first)]);
    assert!(found(&app, "nothing").await.is_empty());
    assert!(found(&app, "%2A%2A").await.is_empty());

    // One thread a page, each once, in order; filters still apply.
    assert_eq!(every_page(&app, "ferry").await, expected);
    assert_eq!(
        found(&app, "ferry&participant=cy@x.com").await,
        [thread(&third)]
    );

    let r = app
        .delete(&format!(
            "/api/v1/threads/{}?permanent=true",
            thread(&fourth)
        ))
        .await;
    assert!(r.status < 300, "{}", r.text);
    assert_eq!(found(&app, "ferry").await, [thread(&first), thread(&third)]);

    // A draft moves its thread up, as in the plain list; its words are not
    // searched.
    let r = app
        .post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "thread_id": thread(&third), "text": "Unsent words"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let expected = vec![thread(&third), thread(&first)];
    assert_eq!(found(&app, "ferry").await, expected);
    assert_eq!(ids(&app.get("/api/v1/threads").await.body)[..2], expected);
    assert!(found(&app, "unsent").await.is_empty());

    if app.db.backend() != Backend::Sqlite {
        return;
    }
    let count = |text: &'static str| {
        let app = &app;
        async move {
            sql!(text)
                .fetch_one(app.db.reader())
                .await
                .unwrap()
                .int("n")
                .unwrap()
        }
    };
    assert_eq!(count("SELECT COUNT(*) AS n FROM threads_fts").await, 3);
    assert_eq!(
        count("SELECT COUNT(*) AS n FROM threads WHERE search_key IS NOT NULL").await,
        3
    );
    sqlx::raw_sql("DELETE FROM threads_fts; UPDATE threads SET search_key = NULL;")
        .execute(app.db.writer())
        .await
        .unwrap();
    assert!(found(&app, "ferry").await.is_empty());
    sqlx::raw_sql(&search::thread_index_backfill())
        .execute(app.db.writer())
        .await
        .unwrap();
    assert_eq!(found(&app, "ferry").await, expected);
    assert_eq!(found(&app, "moved+ten").await, [thread(&first)]);

    // Two threads of the same microsecond get keys of their own within it:
    // one re-keyed in a transaction of its own, one by the group writer
    // (which writes the index after its batch's jobs).
    let at: i64 = 1_900_000_000_000_000;
    for (i, t) in expected.iter().enumerate() {
        sql!(
            "UPDATE threads SET last_message_at = $1 WHERE id = $2",
            at,
            t.as_str()
        )
        .execute(app.db.writer())
        .await
        .unwrap();
        if i == 0 {
            let mut tx = app.db.begin().await.unwrap();
            search::reindex_thread(&mut tx, Backend::Sqlite, t)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        } else {
            let t = t.clone();
            app.db
                .write(move |tx| {
                    Box::pin(async move { search::reindex_thread(tx, Backend::Sqlite, &t).await })
                })
                .await
                .unwrap();
        }
    }
    let keys: Vec<i64> = sql!(
        "SELECT search_key FROM threads WHERE last_message_at = $1",
        at
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap()
    .iter()
    .map(|r| r.int("search_key").unwrap())
    .collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
    let span = search::THREAD_KEY_SPAN;
    assert!(keys.iter().all(|k| k / span == at), "{keys:?}");
    let paged = every_page(&app, "ferry").await;
    assert_eq!(paged.len(), 2, "{paged:?}");
    assert_ne!(paged[0], paged[1]);
}
