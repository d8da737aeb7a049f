// gpu-bisect dashboard: table sorting, and live updates of running bisects by polling the JSON API.
"use strict";

const POLL_MS = 2000;

function cellValue(row, index, numeric) {
  const text = row.cells[index] ? row.cells[index].textContent.trim() : "";
  if (!numeric) return text;
  const value = parseFloat(text);
  return Number.isNaN(value) ? -Infinity : value;
}

function makeSortable(table) {
  const headers = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
  headers.forEach((th, index) => {
    th.addEventListener("click", () => {
      const ascending = !th.classList.contains("sorted-asc");
      headers.forEach((h) => h.classList.remove("sorted-asc", "sorted-desc"));
      th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
      const numeric = th.dataset.type === "number";
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
}

async function fetchJson(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

// The list: while any shown bisect runs, refresh the status and step counts of the shown rows.
function pollList(table) {
  const running = () => table.querySelector('tr[data-status="running"]') !== null;
  if (!running()) return;
  const timer = setInterval(async () => {
    try {
      const url = table.dataset.live + window.location.search;
      const rows = await fetchJson(url);
      for (const bisect of rows) {
        const row = table.querySelector(`tr[data-id="${bisect.id}"]`);
        if (!row) continue;
        row.dataset.status = bisect.status;
        row.cells[1].textContent = bisect.status;
        row.cells[1].className = `status ${bisect.status}`;
        row.cells[5].textContent = bisect.culprit;
        row.cells[7].textContent = bisect.steps + (bisect.steps_running ? ` (${bisect.steps_running} running)` : "");
      }
      if (!running()) clearInterval(timer);
    } catch (error) {
      console.warn(error);
    }
  }, POLL_MS);
}

// A bisect page: while it runs, show progress; when it ends, reload to draw the final plot and report.
function pollBisect(progress) {
  if (progress.dataset.status !== "running") return;
  const timer = setInterval(async () => {
    try {
      const data = await fetchJson(progress.dataset.live);
      const p = data.progress;
      progress.textContent = `${p.steps} steps, ${p.finished} finished, ${p.running} running`;
      if (data.status !== "running") {
        clearInterval(timer);
        window.location.reload();
      }
    } catch (error) {
      console.warn(error);
    }
  }, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach(makeSortable);
  const list = document.querySelector("table[data-live]");
  if (list) pollList(list);
  const progress = document.getElementById("progress");
  if (progress) pollBisect(progress);
});
