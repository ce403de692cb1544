// skyc dashboard: the group list, a group's page (tasks, nodes, the
// timeline of every attempt, logs, cancel) and pools, polled live.
// Every string from the store or a log reaches the page as text
// (append/textContent), never as HTML.
'use strict';
(() => {
  const scriptStart = performance.now();
  const token = new URLSearchParams(location.search).get('token') || '';
  const view = document.getElementById('view');
  const banner = document.getElementById('banner');
  let poll = null; // the current view's timer
  let generation = 0; // bumped on every route change; stale answers are dropped

  // el('td', {className: 'x'}, 'text', child): an element; strings become text nodes.
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k in e) e[k] = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }

  async function api(path, options) {
    const r = await fetch(path, Object.assign({ headers: { 'X-Skyc-Token': token }, cache: 'no-store' }, options));
    if (r.status === 401 || r.status === 403) throw new Error('the dashboard refused this page\'s token (HTTP ' + r.status + '): open the URL skyc dashboard printed');
    return r;
  }

  async function json(path) {
    const r = await api(path);
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
    return body;
  }

  function showError(e) {
    banner.hidden = !e;
    banner.textContent = e ? String(e.message || e) : '';
  }

  // ---- formatting
  const pad = (n) => String(n).padStart(2, '0');
  function clock(ms) {
    const d = new Date(ms);
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  function stamp(ms) {
    const d = new Date(ms);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + clock(ms);
  }
  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + pad(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + pad(Math.floor(s / 60) % 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + pad(Math.floor(s / 3600) % 24) + 'h';
  }
  function ago(now, ms) {
    const s = Math.max(0, Math.round((now - ms) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return stamp(ms).slice(0, 10);
  }
  function statusClass(s) {
    s = String(s || '');
    if (s === 'SUCCEEDED' || s === 'READY') return 'ok';
    if (s.startsWith('FAILED')) return 'bad';
    if (s === 'RUNNING') return 'run';
    if (s === 'RECOVERING' || s === 'STARTING' || s === 'SHUTTING_DOWN' || s === 'CANCELLING') return 'warn';
    if (s === 'CANCELLED') return 'off';
    return 'wait';
  }
  const badge = (s) => el('span', { className: 'badge ' + statusClass(s) }, String(s || '-'));
  const dash = (v) => (v === null || v === undefined || v === '' ? '-' : String(v));

  function setLive(finished) {
    const live = document.getElementById('live');
    live.textContent = finished ? 'ended' : 'live · ' + clock(Date.now());
    live.className = finished ? 'live off' : 'live';
  }

  // ---- routing
  function route() {
    generation += 1;
    clearTimeout(poll);
    showError(null);
    const m = location.hash.match(/^#\/group\/(\d+)$/);
    if (m) groupPage(Number(m[1]), generation);
    else listPage(generation);
  }
  window.addEventListener('hashchange', route);

  function every(ms, gen, fn) {
    const tick = async () => {
      if (gen !== generation) return;
      try {
        await fn();
        showError(null);
      } catch (e) {
        if (gen === generation) showError(e);
      }
      if (gen === generation) poll = setTimeout(tick, ms);
    };
    poll = setTimeout(tick, ms);
  }

  // ---- the list: pools, then groups, newest first
  function listPage(gen) {
    document.title = 'skyc dashboard';
    const pools = el('section', { id: 'pools' });
    const groups = el('section', { id: 'groups' });
    view.replaceChildren(pools, groups);
    const boot = document.getElementById('boot');
    let first = boot && boot.textContent ? JSON.parse(boot.textContent) : null;
    if (boot) boot.textContent = ''; // used once; later visits ask the server
    const draw = (g, p) => {
      if (g.error) throw new Error(g.error);
      if (p.error) throw new Error(p.error);
      drawPools(pools, p.pools || []);
      drawGroups(groups, g);
      document.getElementById('state-dir').textContent = g.state_dir || '';
      setLive(false);
    };
    if (first) {
      try {
        draw(first.groups, first.pools);
      } catch (e) {
        showError(e);
      }
      // The figure the benchmark reads: navigation to the list drawn.
      if (!document.body.dataset.listRenderedMs) {
        // Laid out, not only built: reading a size forces the layout.
        void document.body.offsetHeight;
        performance.mark('skyc-list-rendered');
        const drawn = performance.now();
        document.body.dataset.listRenderedMs = drawn.toFixed(1);
        // The part this script takes: from its start to the list laid out.
        document.body.dataset.listScriptMs = (drawn - scriptStart).toFixed(1);
        // Where the time went: asked, first byte, last byte (ms from navigation).
        const nav = performance.getEntriesByType('navigation')[0];
        if (nav) document.body.dataset.listTiming = [nav.requestStart, nav.responseStart, nav.responseEnd].map((t) => t.toFixed(1)).join(' ');
      }
    }
    const refresh = async () => {
      const [g, p] = await Promise.all([json('/api/groups'), json('/api/pools')]);
      if (gen === generation) draw(g, p);
    };
    if (!first) refresh().catch(showError);
    every(2000, gen, refresh);
  }

  // The list is a grid of rows in chunks of CHUNK: a chunk off screen is
  // neither styled nor laid out (content-visibility), so a long list costs
  // the first screen's layout, not a thousand rows'.
  const CHUNK = 50;
  const COLUMNS = ['ID', 'Name', 'Status', 'Tasks', 'Submitted', 'Duration', 'Recoveries', 'Target'];

  // One row, cloned for each group: cloning is much cheaper than building.
  const ROW = el('div', { className: 'grow', role: 'row' }, ...['num', 'name', '', '', '', 'num', 'num', '']
    .map((c) => el('span', { className: c, role: 'cell' })));
  const DOT = el('span', { className: 'dot' });
  const text = (tag, className, t) => {
    const e = document.createElement(tag);
    e.className = className;
    e.textContent = t;
    return e;
  };

  function drawGroups(section, data) {
    const now = data.now_ms || Date.now();
    const list = el('div', { className: 'glist', id: 'group-list', role: 'table' },
      el('div', { className: 'grow ghead', role: 'row' }, ...COLUMNS.map((h) => el('span', { role: 'columnheader' }, h))));
    let chunk = null;
    data.groups.forEach((g, i) => {
      if (i % CHUNK === 0) {
        chunk = el('div', { className: 'chunk', role: 'rowgroup' });
        list.append(chunk);
      }
      const row = ROW.cloneNode(true);
      const c = row.children;
      row.setAttribute('data-id', g.id);
      c[0].textContent = g.id;
      const link = text('a', '', g.name);
      link.setAttribute('href', '#/group/' + g.id);
      c[1].append(link);
      const note = g.unreachable ? 'unreachable: ' + g.unreachable : g.error ? 'error: ' + g.error : '';
      if (note) c[1].append(text('div', 'note', note));
      c[2].append(text('span', 'badge ' + statusClass(g.status), g.status));
      const dots = text('span', 'dots', '');
      for (const t of g.tasks) {
        const d = DOT.cloneNode(false);
        d.className = 'dot ' + statusClass(t.status);
        d.title = t.name + ': ' + t.status;
        dots.append(d);
      }
      c[3].append(dots, text('span', 'muted', ' ' + g.tasks.length + ' · ' + g.nodes + ' node' + (g.nodes === 1 ? '' : 's')));
      c[4].textContent = ago(now, g.submitted_at_ms);
      c[4].title = stamp(g.submitted_at_ms);
      c[5].textContent = duration((g.finished_at_ms || now) - g.submitted_at_ms);
      c[6].textContent = g.recoveries;
      let target = g.backend;
      if (g.pool) target += ' · pool ' + g.pool;
      if (g.num_jobs > 1) target += ' · rank ' + g.rank + '/' + g.num_jobs;
      c[7].textContent = target;
      chunk.append(row);
    });
    const shown = data.groups.length;
    const title = el('h2', {}, 'Groups ', el('span', { className: 'muted' },
      shown < data.total ? shown + ' newest of ' + data.total : String(data.total)));
    if (!shown) {
      section.replaceChildren(title, el('p', { className: 'empty' }, data.note || 'No groups yet.'));
      return;
    }
    section.replaceChildren(title, list);
  }

  function drawPools(section, pools) {
    if (!pools.length) {
      section.replaceChildren();
      return;
    }
    const cards = pools.map((p) => {
      const ready = p.workers.filter((w) => w.status === 'READY').length;
      const jobName = new Map(p.jobs.map((j) => [j.id, j]));
      const jobLink = (id) => {
        const j = jobName.get(id);
        return el('a', { href: '#/group/' + id, title: j ? j.name + ' rank ' + j.rank + ': ' + j.status : '' }, String(id));
      };
      const workers = p.workers.map((w) => el('tr', {},
        el('td', { className: 'num' }, dash(w.worker)),
        el('td', {}, el('a', { href: '#/group/' + w.group }, w.name)),
        el('td', {}, badge(w.status), w.waiting ? el('div', { className: 'muted waiting' }, w.waiting.why) : null),
        el('td', { className: 'mono' }, dash(w.address)),
        el('td', {}, resources(p.resources)),
        el('td', {}, ...joinWith(w.jobs.map(jobLink), ', '), w.jobs.length ? null : '-')));
      const pending = p.pending_jobs || [];
      return el('div', { className: 'card pool' },
        el('div', { className: 'card-head' },
          el('strong', {}, p.name), ' ', badge(p.status),
          el('span', { className: 'muted' }, ' ' + ready + '/' + dash(p.target_workers) + ' workers ready · ' + p.jobs.length + ' job' + (p.jobs.length === 1 ? '' : 's') + ' · ' + pending.length + ' pending · ' + dash(p.size))),
        el('table', { className: 'list' },
          el('thead', {}, el('tr', {}, ...['Worker', 'Name', 'Status', 'Address', 'Resources', 'Jobs'].map((h) => el('th', {}, h)))),
          el('tbody', {}, ...workers)),
        el('div', { className: 'pending' }, 'Pending jobs: ', ...(pending.length ? joinWith(pending.map(jobLink), ', ') : ['none'])));
    });
    section.replaceChildren(el('h2', {}, 'Pools'), ...cards);
  }

  function joinWith(items, sep) {
    const out = [];
    items.forEach((x, i) => {
      if (i) out.push(sep);
      out.push(x);
    });
    return out;
  }

  function resources(r) {
    if (!r || typeof r !== 'object') return dash(r);
    return Object.entries(r).filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length))
      .map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(', ') || '-';
  }

  // ---- a group's page
  function groupPage(id, gen) {
    document.title = 'group ' + id + ' · skyc';
    const head = el('section', { id: 'group-head' });
    const tasks = el('section', { id: 'tasks' });
    const timeline = el('section', { id: 'timeline' });
    const logs = logPanel(id, gen);
    view.replaceChildren(el('a', { className: 'back', href: '#/' }, '← all groups'), head, tasks, timeline, logs.section);
    let finished = false;
    const refresh = async () => {
      const d = await json('/api/groups/' + id);
      if (gen !== generation) return;
      finished = d.group.finished_at_ms !== null;
      drawHead(head, d);
      drawTasks(tasks, d, logs);
      drawTimeline(timeline, d);
      logs.nodes(d, finished);
      setLive(finished);
      document.getElementById('state-dir').textContent = d.state_dir || '';
      document.title = d.group.name + ' · ' + d.group.status + ' · skyc';
    };
    const tick = async () => {
      if (gen !== generation) return;
      try {
        await refresh();
        showError(null);
      } catch (e) {
        if (gen === generation) showError(e);
      }
      // A finished group changes no more; its logs are read to their end.
      if (gen === generation && !finished) poll = setTimeout(tick, 1000);
    };
    tick();
  }

  function drawHead(section, d) {
    const g = d.group;
    const now = d.now_ms;
    const end = g.finished_at_ms || now;
    const live = g.finished_at_ms === null;
    const items = [
      ['ID', String(g.id)],
      ['Target', g.backend + (g.job ? ' · job ' + g.job : '')],
      ['Submitted', stamp(g.submitted_at_ms) + ' (' + ago(now, g.submitted_at_ms) + ')'],
      ['Duration', duration(end - g.submitted_at_ms) + (live ? ' so far' : '')],
      ['Recoveries', String(g.recoveries)],
      ['Source', dash(g.source)],
    ];
    if (g.pool) items.push(['Pool', g.pool + (g.num_jobs ? ' · rank ' + g.rank + ' of ' + g.num_jobs : '')]);
    if (g.supervisor_pid) items.push(['Supervisor', 'pid ' + g.supervisor_pid]);
    const meta = el('dl', { className: 'meta' });
    for (const [k, v] of items) meta.append(el('div', {}, el('dt', {}, k), el('dd', {}, v)));
    const title = el('h1', {}, el('span', { id: 'group-name' }, g.name), ' ', badge(g.status));
    const actions = el('div', { className: 'actions' });
    if (live && d.kind === 'group') actions.append(cancelButton(g.id));
    const notes = [];
    if (g.unreachable) notes.push(el('div', { className: 'warnbox' }, 'Unreachable: ' + g.unreachable));
    if (g.error) notes.push(el('div', { className: 'errbox' }, 'Error: ' + g.error));
    section.replaceChildren(el('div', { className: 'title-row' }, title, actions), meta, ...notes);
  }

  // Two clicks: a cancel is not undone.
  let cancelArmed = 0;
  function cancelButton(id) {
    const armed = Date.now() - cancelArmed < 4000;
    const b = el('button', { className: armed ? 'danger armed' : 'danger', id: 'cancel', type: 'button' }, armed ? 'Click again to cancel' : 'Cancel group');
    b.addEventListener('click', async () => {
      if (Date.now() - cancelArmed >= 4000) {
        cancelArmed = Date.now();
        b.textContent = 'Click again to cancel';
        b.className = 'danger armed';
        return;
      }
      cancelArmed = 0;
      b.disabled = true;
      try {
        const r = await api('/api/groups/' + id + '/cancel', { method: 'POST' });
        const body = await r.json();
        b.textContent = body.ok ? 'Cancelling…' : body.message;
      } catch (e) {
        showError(e);
      }
    });
    return b;
  }

  function drawTasks(section, d) {
    const g = d.group;
    const handle = g.backend === 'k8s' ? 'Pod' : g.backend === 'aws' ? 'Instance' : 'PID';
    const head = el('tr', {}, ...['Node', 'Hostname', 'Address', handle, 'Attempt', 'Phase', 'Exit', ''].map((h) => el('th', {}, h)));
    const body = el('tbody', {});
    g.tasks.forEach((t) => {
      let restarts = '';
      if (t.restarts > 0) restarts = ' · ' + t.restarts + ' restart' + (t.restarts === 1 ? '' : 's') + ' (' + t.restarts_on_errors + ' on errors)';
      const waiting = t.waiting ? el('div', { className: 'muted waiting' }, 'waiting ' + duration(Date.now() - t.waiting.since_ms) + ': ' + t.waiting.why) : null;
      body.append(el('tr', { className: 'task-row' },
        el('td', { colSpan: 8 }, el('strong', {}, t.name), ' ', badge(t.status), el('span', { className: 'muted' }, ' ' + t.role + ' · ' + t.num_nodes + ' node' + (t.num_nodes === 1 ? '' : 's') + restarts), waiting)));
      for (const n of t.nodes) {
        const where = g.backend === 'k8s' ? n.pod : g.backend === 'aws' ? n.instance : n.pid;
        const open = el('button', { type: 'button', className: 'small' }, 'logs');
        open.addEventListener('click', () => logsFor(t.index, n.rank));
        body.append(el('tr', { className: 'node-row' },
          el('td', {}, t.name + '-' + n.rank),
          el('td', { className: 'mono' }, dash(n.hostname)),
          el('td', { className: 'mono' }, dash(n.ip)),
          el('td', { className: 'mono' }, dash(where) + (n.machine ? ' · ' + n.machine : '')),
          el('td', { className: 'num' }, String(n.attempt)),
          el('td', {}, dash(n.phase)),
          el('td', { className: 'num' + (n.exit_code ? ' badtext' : '') }, dash(n.exit_code)),
          el('td', {}, open)));
      }
    });
    section.replaceChildren(el('h2', {}, 'Tasks and nodes'), el('table', { className: 'list' }, el('thead', {}, head), body));
  }
  let logsFor = () => {};

  const OUTCOME = {
    running: 'running', succeeded: 'succeeded', failed: 'failed', lost: 'lost (preempted)',
    stopped: 'stopped', terminated: 'terminated', cancelled: 'cancelled', unknown: 'unknown',
  };

  function drawTimeline(section, d) {
    const g = d.group;
    const spans = d.timeline;
    const title = el('h2', {}, 'Timeline');
    if (!spans.length) {
      section.replaceChildren(title, el('p', { className: 'empty' }, 'No attempt has started yet.'));
      return;
    }
    const names = new Map(g.tasks.map((t) => [t.index, t.name]));
    const from = Math.min(...spans.map((s) => s.start_ms));
    const to = Math.max(from + 1000, ...spans.map((s) => s.end_ms || d.now_ms));
    const x = (ms) => ((ms - from) / (to - from)) * 100;
    const byNode = new Map();
    for (const s of spans) {
      const key = s.task + '-' + s.node;
      if (!byNode.has(key)) byNode.set(key, []);
      byNode.get(key).push(s);
    }
    const chart = el('div', { className: 'chart' });
    chart.append(el('div', { className: 'axis' }, el('span', {}, clock(from)), el('span', {}, duration(to - from)), el('span', {}, g.finished_at_ms ? clock(to) : 'now')));
    for (const [, list] of byNode) {
      const label = names.get(list[0].task) + '-' + list[0].node;
      const track = el('div', { className: 'track' });
      for (const s of list) {
        const end = s.end_ms || d.now_ms;
        const bar = el('div', {
          className: 'bar ' + s.outcome,
          title: label + ' attempt ' + s.attempt + ': ' + clock(s.start_ms) + ' → ' + (s.end_ms ? clock(s.end_ms) : 'now') + ' · ' + (s.why || s.outcome),
        }, el('span', {}, 'a' + s.attempt));
        bar.style.left = x(s.start_ms) + '%';
        bar.style.width = Math.max(1, x(end) - x(s.start_ms)) + '%';
        track.append(bar);
      }
      chart.append(el('div', { className: 'lane' }, el('div', { className: 'lane-label' }, label), track));
    }
    const legend = el('div', { className: 'legend' }, ...Object.entries(OUTCOME)
      .filter(([k]) => spans.some((s) => s.outcome === k))
      .map(([k, v]) => el('span', {}, el('i', { className: 'bar ' + k }), v)));
    const list = el('ol', { className: 'attempts', id: 'attempts' });
    for (const s of spans) {
      const label = names.get(s.task) + '-' + s.node;
      const when = s.end_ms ? clock(s.start_ms) + ' → ' + clock(s.end_ms) + ' (' + duration(s.end_ms - s.start_ms) + ')' : 'since ' + clock(s.start_ms);
      list.append(el('li', { className: s.outcome, dataset: { outcome: s.outcome, restarted: String(s.restarted) } },
        el('span', { className: 'who' }, label + ' · attempt ' + s.attempt), ' ',
        el('span', { className: 'muted' }, when), ' ',
        el('span', { className: 'why' }, s.why || OUTCOME[s.outcome])));
    }
    const cut = d.timeline_cut ? el('p', { className: 'muted' }, 'The history is long: only its beginning is shown.') : null;
    section.replaceChildren(...[title, chart, legend, list, cut].filter(Boolean));
  }

  // ---- logs: a node's tail, then followed by offset
  function logPanel(id, gen) {
    const select = el('select', { id: 'log-node' });
    const follow = el('input', { type: 'checkbox', id: 'log-follow', checked: true });
    const pre = el('pre', { className: 'log', id: 'log' });
    const info = el('span', { className: 'muted' });
    const section = el('section', { id: 'logs' },
      el('h2', {}, 'Logs'),
      el('div', { className: 'log-bar' }, el('label', {}, 'Node ', select), el('label', {}, follow, ' follow'), info),
      pre);
    let key = '';
    let next = null;
    let decoder = null;
    let timer = null;
    let ended = false;
    let reading = false;
    const LIMIT = 1 << 20; // characters kept on the page
    async function read() {
      if (gen !== generation || !key || reading) return;
      reading = true;
      const mine = key;
      try {
        const [task, rank] = key.split('/');
        let more = true;
        while (more && mine === key && gen === generation) {
          const q = '/api/groups/' + id + '/log?task=' + task + '&rank=' + rank + (next === null ? '' : '&offset=' + next);
          const r = await api(q);
          if (!r.ok) throw new Error('log: HTTP ' + r.status);
          const bytes = new Uint8Array(await r.arrayBuffer());
          if (mine !== key) break;
          const size = Number(r.headers.get('X-Skyc-Size'));
          next = Number(r.headers.get('X-Skyc-Next'));
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          const text = decoder.decode(bytes, { stream: true });
          if (text) {
            pre.append(text);
            if (pre.textContent.length > LIMIT) pre.textContent = pre.textContent.slice(-LIMIT / 2);
            if (atEnd) pre.scrollTop = pre.scrollHeight;
          }
          info.textContent = ' ' + size + ' bytes';
          more = next < size;
        }
      } catch (e) {
        showError(e);
      } finally {
        reading = false;
      }
      if (gen !== generation) return;
      // Another node was chosen meanwhile: read it now.
      if (mine !== key) read();
      else if (follow.checked && !ended) timer = setTimeout(read, 1000);
    }
    function open(k) {
      clearTimeout(timer);
      key = k;
      next = null;
      decoder = new TextDecoder('utf-8');
      pre.replaceChildren();
      select.value = k;
      read();
    }
    select.addEventListener('change', () => open(select.value));
    follow.addEventListener('change', () => {
      clearTimeout(timer);
      if (follow.checked) read();
    });
    logsFor = (task, rank) => {
      open(task + '/' + rank);
      section.scrollIntoView({ behavior: 'smooth' });
    };
    return {
      section,
      nodes(d, finished) {
        const options = [];
        for (const t of d.group.tasks) for (const n of t.nodes) options.push([t.index + '/' + n.rank, t.name + '-' + n.rank]);
        const sig = options.map((o) => o[0]).join(',');
        if (select.dataset.sig !== sig) {
          select.dataset.sig = sig;
          select.replaceChildren(...options.map(([v, l]) => el('option', { value: v }, l)));
          if (key) select.value = key;
        }
        const wasEnded = ended;
        ended = finished;
        if (!key && options.length) open(options[0][0]);
        // One more read once the group ends: what was written last.
        else if (finished && !wasEnded) read();
      },
    };
  }

  route();
})();
