// The page of `python -m dbaf_jax.web`: no framework, no build step.
// The session secret lives in this tab's memory only; the password goes to the server
// once, in the body of the start request, and the fields are emptied at once.
"use strict";

const $ = (id) => document.getElementById(id);
// kinds: which names are photos and clips, as the server says (dbaf_jax/storage/file_kinds.py).
const state = { session: null, limits: null, kinds: null, mode: "anonymize", rows: [], job: null, urls: [], downloading: false };

class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

async function api(method, path, body, headers = {}) {
  const init = { method, headers: { "X-Session": state.session, ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" || body instanceof Blob ? body : JSON.stringify(body);
    if (!(body instanceof Blob)) init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    throw new ApiError(message, response.status);
  }
  return response;
}

// A session of this page: its secret, the server's bounds and the kinds of files it takes.
async function newSession() {
  const response = await fetch("/api/session", { method: "POST" });
  const reply = await response.json();
  if (!response.ok) throw new Error(reply.error || `${response.status} ${response.statusText}`);
  Object.assign(state, { session: reply.session, limits: reply.limits, kinds: reply.kinds });
  return reply;
}

// As the server says it (jobs._megabytes): MB, KB under 1 MB, bytes under 1 KB.
function megabytes(bytes) {
  if (bytes >= 1048576) return (bytes / 1048576).toFixed(1) + " MB";
  return bytes >= 1024 ? (bytes / 1024).toFixed(1) + " KB" : bytes + " bytes";
}

// As the server says it (jobs.over_the_limit): in bytes where the two would read alike.
function overTheLimit(bytes, bound) {
  let [size, limit] = [megabytes(bytes), megabytes(bound)];
  if (size === limit) [size, limit] = [bytes, bound].map((n) => n.toLocaleString("en-US") + " bytes");
  return `${size} is over the limit of ${limit}`;
}

function isClip(name) {
  const lowered = name.toLowerCase();
  return state.kinds !== null && state.kinds.clips.some((suffix) => lowered.endsWith(suffix));
}

function showError(message) { $("error").textContent = message ? "error: " + message : ""; }

function objectUrl(blob) { const url = URL.createObjectURL(blob); state.urls.push(url); return url; }

function preview(blob, name) {
  const clip = isClip(name);
  const element = document.createElement(clip ? "video" : "img");
  element.src = objectUrl(blob);
  if (clip) element.controls = true; else element.alt = name;
  return element;
}

function setMode(mode) {
  state.mode = mode;
  $("tab-anonymize").setAttribute("aria-selected", mode === "anonymize");
  $("tab-recover").setAttribute("aria-selected", mode === "recover");
  $("confirm-label").hidden = mode !== "anonymize";
  $("new-key-label").hidden = mode !== "anonymize";
  $("start").textContent = mode === "anonymize" ? "Anonymize" : "Recover";
  $("key-hint").textContent = mode === "anonymize"
    ? "A key file lets photos be recovered after their metadata is stripped; keep it, and the face ledger the run gives back, with your password."
    : "Photos and clips keep what recovery needs; a key file (and its face ledger) is needed only for copies that lost it. " +
      `Drop a clip's sidecar (its name and ${state.kinds ? state.kinds.sidecar : "the sidecar's suffix"}) with it.`;
  clear();
}

function clear() {
  if (state.job && !state.job.deleted) {  // the server keeps a run that is still going
    api("DELETE", `/api/jobs/${state.job.id}`).catch(() => {});
  }
  state.urls.forEach((url) => URL.revokeObjectURL(url));
  Object.assign(state, { rows: [], job: null, urls: [] });
  $("list").tBodies[0].replaceChildren();
  $("results").hidden = true;
  $("summary").textContent = $("status").textContent = $("extras").textContent = $("deleted").textContent = "";
  $("start").disabled = false;
  showError("");
}

function addFiles(files) {
  if (state.job) clear();
  for (const file of files) {
    const row = $("list").tBodies[0].insertRow();
    row.className = "file-row";
    row.dataset.name = file.name;
    row.insertCell().textContent = `${file.name} (${megabytes(file.size)})`;
    const progress = document.createElement("progress");
    progress.max = 1;
    progress.value = 0;
    const status = document.createElement("div");
    status.className = "state";
    const message = document.createElement("div");
    message.className = "message";
    row.insertCell().append(progress, status, message);
    const input = row.insertCell();
    if (/^(image|video)\//.test(file.type)) input.append(preview(file, file.name));
    row.insertCell().className = "result";
    state.rows.push({ file, row, progress, status, message, entry: null });
    if (state.limits && file.size > state.limits.file_bytes) {
      setRow(state.rows.at(-1), "refused", `${file.name}: ${overTheLimit(file.size, state.limits.file_bytes)} per file`);
    }
  }
}

function setRow(item, name, text) {
  item.status.textContent = name;
  item.status.className = "state " + name;
  if (text !== undefined) item.message.textContent = text;
}

function upload(job, item) {
  // One request per file: its bytes as the body (so the bar shows them going), its name in a header.
  return new Promise((resolve) => {
    const tooLarge = item.file.size > state.limits.file_bytes;
    const request = new XMLHttpRequest();
    request.open("PUT", `/api/jobs/${job}/files`);
    request.setRequestHeader("X-Session", state.session);
    request.setRequestHeader("X-File-Name", encodeURIComponent(item.file.name));
    request.setRequestHeader("X-File-Size", String(item.file.size));
    request.upload.onprogress = (event) => { if (event.lengthComputable) item.progress.value = event.loaded / event.total; };
    request.onload = () => {
      let reply = {};
      try { reply = JSON.parse(request.responseText); } catch (e) { reply = { error: request.statusText }; }
      if (request.status === 200) {
        item.entry = reply;
        setRow(item, reply.state === "skipped" ? "skipped" : "uploaded", reply.message);
      } else {
        item.progress.value = 0;
        setRow(item, "refused", reply.error);
      }
      resolve();
    };
    request.onerror = () => { setRow(item, "refused", "the upload failed"); resolve(); };
    setRow(item, "uploading");
    // A file over the limit is announced without its bytes: the server refuses it by its size and names it.
    request.send(tooLarge ? "" : item.file);
  });
}

async function start() {
  showError("");
  const password = $("password").value;
  const confirm = $("confirm").value;
  const key = document.querySelector('input[name="key"]:checked').value;
  if (!state.rows.length) return showError("drop at least one photo or clip first");
  if (!password) return showError("type the password");
  if (state.mode === "anonymize" && password !== confirm) return showError("the two passwords differ: type the same password twice");
  $("start").disabled = true;
  try {
    const job = (await (await createJob()).json()).job;
    state.job = { id: job, state: "open" };
    if (key === "file") {
      const keyFile = $("key-file").files[0];
      if (!keyFile) throw new Error("choose the key file, or another key option");
      await api("PUT", `/api/jobs/${job}/key/key`, keyFile);
      if ($("ledger-file").files[0]) await api("PUT", `/api/jobs/${job}/key/ledger`, $("ledger-file").files[0]);
    }
    for (const item of state.rows) await upload(job, item);
    if (!state.rows.some((item) => item.entry)) throw new Error("no file was taken");
    $("password").value = $("confirm").value = "";
    await api("POST", `/api/jobs/${job}/start`, { password, confirm, key });
    poll();
  } catch (err) {
    showError(err.message);
    $("start").disabled = false;
  }
}

// A session ends when unused for long (or when the page was kept in the browser's back-forward
// cache after it said goodbye): a page without a run asks for a new one and goes on.
async function createJob() {
  try {
    return await api("POST", "/api/jobs", { operation: state.mode });
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) throw err;
    await newSession();
    return api("POST", "/api/jobs", { operation: state.mode });
  }
}

async function poll() {
  let job;
  try {
    job = await (await api("GET", `/api/jobs/${state.job.id}`)).json();
  } catch (err) {
    return showError(err.message);
  }
  for (const entry of job.files) {
    const item = state.rows.find((each) => each.entry && each.entry.index === entry.index);
    if (!item) continue;
    item.entry = entry;
    if (entry.state === "working" || entry.state === "queued") item.progress.removeAttribute("value");
    else item.progress.value = 1;
    setRow(item, entry.state, entry.message);
  }
  if (job.state !== "done") return setTimeout(poll, 400);
  state.job = { ...job, deleted: false };
  await showResults(job);
}

async function showResults(job) {
  $("results").hidden = false;
  $("summary").textContent = job.summary;
  // The command line's exit status, in words: anything but 0 means something was not done as asked.
  $("status").textContent = job.status === 0 ? "All done." :
    `Not everything was done (the command line would exit with status ${job.status}): the summary says what and why.`;
  $("status").className = job.status === 0 ? "" : "state failed";
  if (job.error) showError(job.error);
  for (const item of state.rows) {
    if (!item.entry) continue;
    const cell = item.row.cells[3];
    for (const [k, name] of item.entry.outputs.entries()) {
      const path = `/api/jobs/${job.id}/results/${item.entry.index}/${k}`;
      if (!name.endsWith(".json")) {
        const blob = await (await api("GET", path)).blob();
        const element = preview(blob, name);
        element.className = "result";
        cell.append(element);
      }
      cell.append(downloadButton(name, path));
    }
  }
  $("extras").replaceChildren();
  for (const [k, name] of job.extras.entries()) $("extras").append(downloadButton(name, `/api/jobs/${job.id}/extras/${k}`), " ");
  if (job.extras.length) $("extras").prepend("Keep these with your password: ");
  setDownloads();
}

function downloadButton(name, path) {
  const button = document.createElement("button");
  button.className = "download";
  button.dataset.name = name;
  button.textContent = "download " + name;
  button.onclick = () => download(path + "?download=1", name);
  return button;
}

// One download at a time (a double click asks once), none once the server deleted the run's files.
function setDownloads() {
  const off = state.downloading || !state.job || state.job.deleted;
  for (const button of document.querySelectorAll("button.download, #zip")) button.disabled = off;
}

async function download(path, name) {
  if (state.downloading || !state.job || state.job.deleted) return;
  state.downloading = true;
  setDownloads();
  try {
    const response = await api("GET", path);
    const link = document.createElement("a");
    link.href = objectUrl(await response.blob());
    link.download = name;
    link.click();
    const deleted = response.headers.get("X-Run-Deleted");
    if (deleted) {
      state.job.deleted = true;
      $("deleted").textContent = `This run's files were deleted from the server (${deleted}).`;
    }
  } catch (err) {
    showError(err.message);
  } finally {
    state.downloading = false;
    setDownloads();
  }
}

async function init() {
  try {
    const reply = await newSession();
    $("limits").textContent = `Up to ${reply.limits.files} files, ${megabytes(reply.limits.file_bytes)} each and ` +
      `${megabytes(reply.limits.job_bytes)} in all; photos up to ${reply.limits.pixels.toLocaleString("en-US")} pixels.`;
  } catch (err) {
    showError("cannot reach the server: " + err.message);
  }
  $("tab-anonymize").onclick = () => setMode("anonymize");
  $("tab-recover").onclick = () => setMode("recover");
  $("files").onchange = () => { addFiles($("files").files); $("files").value = ""; };
  const drop = $("drop");
  drop.ondragover = (event) => { event.preventDefault(); drop.classList.add("over"); };
  drop.ondragleave = () => drop.classList.remove("over");
  drop.ondrop = (event) => { event.preventDefault(); drop.classList.remove("over"); addFiles(event.dataTransfer.files); };
  $("start").onclick = start;
  $("clear").onclick = clear;
  // The session secret dies with the page, so nothing could fetch its runs' files again: the
  // session ends, and the server deletes its runs (a running one when it has finished).
  window.addEventListener("pagehide", () => {
    if (state.session) {
      fetch("/api/session", { method: "DELETE", headers: { "X-Session": state.session }, keepalive: true });
      state.session = null;
    }
  });
  window.addEventListener("pageshow", (event) => {  // back from the back-forward cache: its session has ended
    if (!event.persisted) return;
    state.job = null;
    clear();
    newSession().catch((err) => showError("cannot reach the server: " + err.message));
  });
  $("zip").onclick = () => download(`/api/jobs/${state.job.id}/zip`, "dbaf-results.zip");
  setMode("anonymize");
}

init();
