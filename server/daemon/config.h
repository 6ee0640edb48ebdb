/*
 * config.h: the daemon's one option table. Each option is declared once, in XLS_OPTIONS below;
 * that table drives the parser of the config file, the XLSERVE_* environment variables and the
 * command-line flags (precedence flag > env > file > default), --help, --dump-config (the
 * effective configuration) and --config-template (the shipped config/xlserve.conf).
 * Thread: main thread at start (config_load); afterwards the struct is read-only and may be
 * read by any thread.
 */
#ifndef XLS_CONFIG_H
#define XLS_CONFIG_H

#include <stdio.h>

/* One row an option, in the order --help and the template list them:
 *   INT(name, default, min, max, help)  long long, range-checked
 *   BOOL(name, default, help)           0/1: true/false/yes/no/on/off/1/0
 *   STR(name, default, help)            text
 *   ESC(name, default, help)            text with C escapes \n \t \\ \" \xNN
 * A consumer names the macro each kind of row expands to (XLS_EACH_OPTION: one for all). */
#define XLS_OPTIONS(INT, BOOL, STR, ESC)                                                         \
  STR(model, XL_DEFAULT_MODEL_DIR,                                                               \
    "Model directory (config.json, model.safetensors, tokenizer). Default: the bundled model.")  \
  STR(model_name, "",                                                                            \
    "Model id reported by /v1/models and accepted in requests' \"model\" field (empty = the "    \
    "model directory's name). A request's \"model\" field is accepted but not used.")            \
  STR(host, "127.0.0.1", "IPv4 or IPv6 address to listen on (0.0.0.0 / :: = all).")              \
  INT(port, "8080", 0, 65535,                                                                    \
    "TCP port to listen on (0 = any free port; the bound port is logged at start).")             \
  INT(workers, "2", 1, 256,                                                                      \
    "Worker threads running batched forward passes; each forward takes at most "                 \
    "ceil(running / workers) sessions, so the workers run side by side. One per core "           \
    "(compare: bench/load.py --streams 32,64 -- --workers 1, then --workers 2).")                \
  STR(cpu, "auto",                                                                               \
    "Kernel family of the forward pass: auto (the best this CPU runs), avx512, avx2 (AVX2 + "    \
    "FMA), neon (aarch64) or portable (plain C). A family this CPU cannot run is an error at "   \
    "start; the ready log line and `xlserve info` name the one in use.")                         \
  STR(kv_dtype, "f32",                                                                           \
    "Element type of each session's memory (its cached keys and values): f32 (exact), bf16 "     \
    "(half the bytes; rounded to nearest even) or int8 (about a quarter: one scale per position " \
    "and head). Saved sessions of another dtype are converted when they load; `xlserve info "    \
    "--kv-dtype X` prints the bytes per session.")                                               \
  STR(weights, "f32",                                                                            \
    "How the big weight matrices are held: f32 (as stored), bf16 (half the bytes; a bf16 file "  \
    "is used in place) or int8 (a quarter, one scale per 32 weights). The quality cost of each " \
    "is measured in docs/models.md; activations stay F32.")                                      \
  INT(blas_threads, "1", 0, 256,                                                                 \
    "OpenBLAS threads (0 = leave OpenBLAS's own default); OpenBLAS only runs the prompt "        \
    "attention. Keep workers x blas_threads <= cores.")                                          \
  INT(threads_per_worker, "1", 1, 64,                                                            \
    "Threads of each worker's forward pass: a step's products with the weights (split over "     \
    "output rows) and its decode attention (split over heads) run on this many threads, kept "   \
    "for the worker's life (they sleep between requests). Results are bit-identical for any "    \
    "count. Speeds up one stream on an idle machine; keep workers x threads_per_worker <= "      \
    "cores (docs/performance.md).")                                                              \
  INT(max_batch, "64", 1, 4096,                                                                  \
    "Most sessions in one batched forward pass. When more are ready they take turns (round "     \
    "robin).")                                                                                   \
  INT(batch_tokens, "512", 1, 1048576,                                                           \
    "Token budget of one batched forward: one per decoding session plus prefill chunks "         \
    "(bounds the pause a long prompt causes in the other streams).")                             \
  INT(prefill_chunk, "128", 1, 1048576,                                                          \
    "Prompt tokens fed per session per forward pass, so long prompts interleave with the "       \
    "decode steps of other sessions. Models without same_length use their tgt_len instead.")     \
  INT(max_running, "64", 1, 1000000,                                                             \
    "Generations admitted to the scheduler at once; the rest wait in the queue (FIFO).")         \
  INT(max_queue, "1024", 0, 1000000,                                                             \
    "Generations that may wait beyond max_running; one more gets 429 with Retry-After.")         \
  INT(max_connections, "4096", 16, 1000000, "Open HTTP connections (idle ones included).")       \
  INT(idle_timeout, "75", 0, 86400,                                                              \
    "Seconds a connection may sit idle (keep-alive, slow client) before it is closed; 0 = "      \
    "never. Keep it above a proxy's upstream keepalive_timeout.")                                \
  INT(request_timeout, "30", 1, 86400,                                                           \
    "Seconds a client has to send a request's body once its headers arrived (slowloris).")       \
  INT(header_timeout, "10", 1, 86400,                                                            \
    "Seconds a new connection has to send a complete request head (request line and headers; "   \
    "slowloris). A kept-alive connection gets idle_timeout + header_timeout from the end of its " \
    "previous response. Past it the connection is closed without a reply.")                      \
  INT(max_connections_per_client, "256", 0, 1000000,                                             \
    "Open connections one client address may hold (0 = no limit); one more is closed at "        \
    "accept. Exempt: the addresses in trusted_proxies (behind a proxy every client is the "      \
    "proxy) and this host's 127.0.0.1 and ::1.")                                                 \
  INT(max_body_bytes, "1048576", 1024, 1073741824,                                               \
    "Largest request body in bytes (every route, the tokenizer's too); a larger one gets 413 "   \
    "before it is read.")                                                                        \
  INT(max_prompt_tokens, "65536", 1, 16777216,                                                   \
    "Most tokens one request may feed (all its prompts together, plus chat template); more "     \
    "gets 422. Also the most ids /tokenize may return and /detokenize may take.")                \
  INT(default_max_tokens, "256", 0, 16777216, "max_tokens of a request that gives none.")        \
  INT(max_tokens_limit, "4096", 1, 16777216, "Largest max_tokens a request may ask for.")        \
  INT(ping_interval, "15", 0, 3600,                                                              \
    "Seconds between SSE comment pings (': ping') while a stream waits; 0 = off.")               \
  INT(drain_timeout, "30", 0, 86400,                                                             \
    "On SIGTERM: seconds running generations may take to finish before they are cancelled.")     \
  INT(session_ram_mb, "1024", 1, 16777216,                                                       \
    "RAM budget of the session table in MiB; least-recently-used idle sessions beyond it leave " \
    "RAM: with a store they are saved (if needed) and come back from it on their next request, " \
    "transparently; without one (durability off) they are gone: 404 session_expired.")           \
  INT(max_sessions_per_key, "0", 0, 100000000,                                                   \
    "Sessions one API key may hold in RAM (0 = no limit); creating one more (a turn naming a "   \
    "new id, POST /v1/sessions, a fork, an import) gets 429 quota_exceeded. Without api_keys "   \
    "every client is one key.")                                                                  \
  INT(session_ram_mb_per_key, "0", 0, 16777216,                                                  \
    "RAM in MiB one API key's sessions may hold; beyond it that key's least-recently-used idle " \
    "sessions leave RAM (0 = no cap but the fair share: when session_ram_mb must evict, keys "   \
    "over an even share of it lose sessions first, so one key cannot push out another's).")      \
  INT(max_running_per_key, "0", 0, 1000000,                                                      \
    "Generation requests of one API key running or queued at once (0 = no limit); one more gets " \
    "429 quota_exceeded with Retry-After.")                                                      \
  INT(max_running_per_client, "0", 0, 1000000,                                                   \
    "Generation requests of one client address running or queued at once (0 = no limit); one "   \
    "more gets 429 quota_exceeded with Retry-After. Behind a proxy in trusted_proxies the "      \
    "client is the X-Forwarded-For address; the proxies themselves and this host's 127.0.0.1 "   \
    "and ::1 are exempt (a local proxy not listed would otherwise share one cap among all its "  \
    "clients).")                                                                                 \
  INT(stream_stall_timeout, "30", 0, 86400,                                                      \
    "Seconds a stream may have bytes waiting that its client does not read before it is "        \
    "cancelled and its connection closed (0 = never). Meanwhile an unread stream stops "         \
    "generating once 64 KiB wait for its client, and gives up its place among max_running "      \
    "until the client reads.")                                                                   \
  INT(prefix_cache_mb, "256", 0, 16777216,                                                       \
    "RAM in MiB for the prefix cache: the memory of prompt prefixes (a chat's leading system "   \
    "messages, else the prompt) in whole prefill chunks, so a new session starting with one "    \
    "skips feeding it; counted in session_ram_mb (the cache yields first). 0 = off.")            \
  INT(session_ttl, "86400", 0, 315360000,                                                        \
    "Seconds an unused session lives before it expires, in RAM and in the store (0 = never).")   \
  INT(session_tombstones, "100000", 0, 100000000,                                                \
    "Expired (or, without a store, evicted) session ids remembered, so their next use gets 404 " \
    "session_expired instead of a silently fresh memory.")                                       \
  STR(state_dir, "",                                                                             \
    "Directory of the durable session store (SQLite in WAL mode: sessions.db; created if "       \
    "missing; one daemon per directory). Empty: no store, sessions live in RAM only.")           \
  STR(durability, "turn",                                                                        \
    "When a session's new state reaches the store (state_dir): turn = committed before the "     \
    "turn's response completes (for a stream, before data: [DONE]); async = committed in the "   \
    "background within async_commit_ms; off = never (RAM only).")                                \
  INT(async_commit_ms, "1000", 1, 60000,                                                         \
    "durability async: the longest a turn's state waits before its commit (saves that wait "     \
    "together share one commit).")                                                               \
  BOOL(store_fsync, "true",                                                                      \
    "Each store commit is flushed to disk (fsync: survives a power loss); false: a commit "      \
    "survives a crash of the daemon but maybe not of the machine (faster).")                     \
  STR(store, "sqlite",                                                                           \
    "Session store backend: sqlite (a file in state_dir, one daemon) or redis (redis_url: "      \
    "several replicas share it; state_dir is then not used).")                                   \
  STR(redis_url, "redis://127.0.0.1:6379/0",                                                     \
    "store redis: redis://[:PASSWORD@]HOST:PORT/DB, or unix:/PATH/redis.sock?db=N (a password "  \
    "in the URL shows in process listings and environments: prefer redis_password_file).")       \
  STR(redis_password_file, "",                                                                   \
    "store redis: file holding the Redis password (AUTH; first line, trailing newline removed).") \
  STR(redis_prefix, "xls",                                                                       \
    "store redis: prefix of every key (several deployments can share one Redis). A session's "   \
    "keys carry a {hash tag}, so they live in one Redis Cluster slot.")                          \
  INT(redis_wait_replicas, "0", 0, 64,                                                           \
    "store redis: after each commit, WAIT for this many Redis replicas to acknowledge it "       \
    "(0 = the primary's acknowledgement is enough).")                                            \
  INT(redis_wait_timeout_ms, "1000", 1, 60000,                                                   \
    "store redis: the longest WAIT for redis_wait_replicas (a shortfall is logged and counted).") \
  STR(api_keys, "",                                                                              \
    "Comma-separated API keys accepted as 'Authorization: Bearer KEY'. With no keys here and "   \
    "no api_key_file the API is open. /health and /metrics never need a key.")                   \
  STR(api_key_file, "",                                                                          \
    "File with one API key per line (# comments, blank lines ignored); re-read on SIGHUP.")      \
  STR(trusted_proxies, "",                                                                       \
    "Comma-separated IP addresses of reverse proxies whose X-Forwarded-For and X-Request-Id "    \
    "headers are trusted.")                                                                      \
  STR(cors_origins, "",                                                                          \
    "Browser origins allowed to call the API from other pages (CORS): * for any, or a "          \
    "comma-separated list like https://chat.example.com,http://localhost:3000; empty = off.")    \
  STR(path_prefix, "",                                                                           \
    "URL path prefix stripped before routing, e.g. /xl (requests outside it get 404).")          \
  STR(log_file, "-",                                                                             \
    "Where the JSON log lines go: - = stderr, else a file (appended; reopened on SIGHUP).")      \
  BOOL(access_log, "true", "Log one JSON line per request.")                                     \
  ESC(chat_system_prefix, "", "Chat template: text before a system message.")                    \
  ESC(chat_system_suffix, "\\n\\n", "Chat template: text after a system message.")               \
  ESC(chat_user_prefix, "User: ", "Chat template: text before a user message.")                  \
  ESC(chat_user_suffix, "\\n", "Chat template: text after a user message.")                      \
  ESC(chat_assistant_prefix, "Assistant: ",                                                      \
    "Chat template: text before an assistant message; also fed to prompt the reply.")            \
  ESC(chat_assistant_suffix, "\\n", "Chat template: text after an assistant message.")           \
  ESC(chat_tool_prefix, "Tool: ",                                                                \
    "Chat template: text before a tool result (a role tool message).")                           \
  ESC(chat_tool_suffix, "\\n", "Chat template: text after a tool result.")                       \
  ESC(chat_stop, "",                                                                             \
    "Chat template: an extra stop string for chat replies. Replies always stop at "              \
    "chat_assistant_suffix + chat_user_prefix (trailing spaces trimmed), i.e. where the model "  \
    "starts writing the user's next turn.")

typedef enum { OPT_INT, OPT_BOOL, OPT_STR, OPT_ESC } opt_type;

/* Every row, whatever its kind, expanded to X(name, ...). */
#define XLS_EACH_OPTION(X) XLS_OPTIONS(X, X, X, X)

enum {
#define XLS_INDEX(name, ...) OPTI_##name,
  XLS_EACH_OPTION(XLS_INDEX)
#undef XLS_INDEX
  XLS_N_OPTIONS
};

typedef struct config {
#define XLS_FIELD_INT(name, ...) long long name;
#define XLS_FIELD_BOOL(name, ...) int name;
#define XLS_FIELD_TEXT(name, ...) char *name;
  XLS_OPTIONS(XLS_FIELD_INT, XLS_FIELD_BOOL, XLS_FIELD_TEXT, XLS_FIELD_TEXT)
#undef XLS_FIELD_INT
#undef XLS_FIELD_BOOL
#undef XLS_FIELD_TEXT
  char *config_file; /* --config / XLSERVE_CONFIG: not an option of the file itself */
  const char *origin[XLS_N_OPTIONS]; /* "default", "file", "env" or "flag" */
} config;

typedef enum { CONFIG_RUN, CONFIG_EXIT_OK, CONFIG_EXIT_USAGE } config_result;

/* Parses defaults, file, env and argv (argv[0] is "serve"). Prints errors naming the option to
 * err. --help, --dump-config, --config-template print to out and return CONFIG_EXIT_OK. */
config_result config_load(config *c, int argc, char **argv, FILE *out, FILE *err);
void config_free(config *c);
/* Writes the effective configuration in the config file's syntax (api_keys redacted). */
void config_dump(const config *c, FILE *out);
/* Writes the fully commented config file with every option at its default. */
void config_template(FILE *out);

#endif
