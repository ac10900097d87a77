-- Headless Neovim against the real server: attach, explainContext shows segments, ask streams
-- and completes, <C-c> cancels, pin changes the pinned segment, code actions, conversations
-- (:ContenoxAsk continues, :ContenoxNew starts another), status(line).
local H = dofile(vim.g.contenox_test_dir .. '/helpers.lua')
local contenox = require('contenox')
local util = require('contenox.util')

local ws = H.make_workspace()
local notes = H.capture_notify()
local app = ws .. '/app.py'
local T = 240000 -- one model operation on 2 slow cores, generously
local Q = 30000 -- requests that do not run the model
local client ---@type vim.lsp.Client

local function request(method, params)
  local r = client:request_sync(method, params or vim.empty_dict(), T, vim.fn.bufnr(app))
  H.ok(r, method .. ': no answer')
  if r.err then
    error(method .. ': ' .. util.describe_error(r.err), 2)
  end
  return r.result
end

local function errors()
  local out = {}
  for _, n in ipairs(notes) do
    if n.level == vim.log.levels.ERROR then
      out[#out + 1] = n.msg
    end
  end
  return out
end

local function close_floats()
  for _, w in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_config(w).relative ~= '' then
      vim.api.nvim_win_close(w, true)
    end
  end
  vim.cmd.buffer(vim.fn.bufnr(app))
end

local function pinned_segments()
  local r = request('contenox/explainContext')
  local out = {}
  for _, s in ipairs(r.segments) do
    if s.kind == 'pinned' then
      out[#out + 1] = s
    end
  end
  return out
end

test('setup enables the server; it attaches to a Python buffer', function()
  H.ok(contenox.setup({ max_tokens = 6, debounce_ms = 100, status_interval_ms = 300 }), 'setup')
  vim.cmd.edit(app)
  H.wait_for(function()
    client = util.client(0)
    return client ~= nil and client.initialized
  end, 60000, 'the contenox client to attach')
  H.eq(client.root_dir, ws, 'root dir')
  H.eq(client.offset_encoding, 'utf-8', 'negotiated position encoding')
  H.eq(client.config.init_options.maxTokens, 6)
  H.ok(vim.tbl_contains(client.server_capabilities.executeCommandProvider.commands, 'contenox.pin'))
end)

test('right after attach the server tracks the buffer (didOpen not dropped) and answers', function()
  -- Neovim sends didOpen right after `initialized`; ask at once, like a user's mapping might.
  local doc = client:request_sync('contenox/document', { textDocument = { uri = vim.uri_from_fname(app) } }, T)
  local explained = client:request_sync('contenox/explainContext', vim.empty_dict(), T)
  -- Then wait for the server to be fully up and make sure the buffer is open there.
  H.wait_for(function()
    local r = client:request_sync('contenox/explainContext', vim.empty_dict(), T)
    return r and not r.err
  end, 60000, 'the server runtime')
  local again = client:request_sync('contenox/document', { textDocument = { uri = vim.uri_from_fname(app) } }, T)
  if again and again.err then -- re-send didOpen so the remaining tests are meaningful
    local b = vim.fn.bufnr(app)
    vim.lsp.buf_detach_client(b, client.id)
    vim.lsp.buf_attach_client(b, client.id)
  end
  local problems = {}
  if not doc or doc.err then
    problems[#problems + 1] = 'didOpen right after initialized was dropped: ' .. (doc and util.describe_error(doc.err) or 'timeout')
  end
  if not explained or explained.err then
    problems[#problems + 1] = 'explainContext right after initialized: ' .. (explained and util.describe_error(explained.err) or 'timeout')
  end
  H.eq(problems, {}, 'server readiness')
end)

test(':ContenoxExplainContext shows the segment table in a float', function()
  local explain = require('contenox.explain')
  explain.last = nil
  vim.api.nvim_win_set_cursor(0, { 5, 4 })
  vim.cmd('ContenoxExplainContext')
  H.wait_for(function()
    return explain.last ~= nil
  end, Q, 'the explain float')
  local text = H.buf_text(explain.last.buf)
  for _, word in ipairs({ 'segment', 'system', 'tools', 'repo map', 'user', 'total', 'resident' }) do
    H.match(text, word, 'explain table')
  end
  H.ok(text:find('cached') or text:find('new'), 'statuses shown')
  H.eq(vim.api.nvim_win_get_config(explain.last.win).relative, 'editor', 'a floating window')
  H.eq(H.find(explain.last.result.segments, function(s) return s.kind == 'system' end).tokenStart, 0)
  close_floats()
end)

test(':ContenoxAsk streams partial results into a float and completes', function()
  local ask = require('contenox.ask')
  vim.api.nvim_win_set_cursor(0, { 5, 4 })
  vim.cmd('ContenoxAsk What does add return?')
  local state = ask.current
  H.ok(state, 'an ask started')
  H.wait_for(function()
    return state.done
  end, T, 'the answer')
  H.eq(state.err, nil, 'no error')
  H.ok(#state.pieces >= 1, 'at least one partial result')
  H.eq(table.concat(state.pieces), state.result.text, 'pieces concatenate to the final text')
  H.ok(#state.result.text > 0, 'non-empty answer')
  local shown = H.buf_text(state.buf)
  H.ok(shown:find(state.result.text, 1, true), 'the float shows the answer')
  H.match(shown, 'TTFT', 'metrics footer')
  H.eq(vim.bo[state.buf].filetype, 'markdown')
  close_floats()
end)

test('the statusline shows state, resident tokens and the last TTFT', function()
  H.wait_for(function()
    return contenox.statusline():find('TTFT') ~= nil
  end, 30000, 'statusline with TTFT: ' .. contenox.statusline())
  local s = contenox.statusline()
  H.match(s, '^Contenox ')
  H.match(s, '[%a]+ [%d,]+ tok')
end)

test(':ContenoxPin adds a pinned segment; :ContenoxUnpin removes it', function()
  H.eq(#pinned_segments(), 0, 'no pins at first')
  vim.cmd('ContenoxPin')
  H.wait_for(function()
    return H.find(notes, function(n) return n.msg:find('pinned %S*app%.py') end) ~= nil
  end, 30000, 'the pin notification: ' .. vim.inspect(notes))
  local pins = pinned_segments()
  H.eq(#pins, 1, 'one pinned segment')
  H.match(pins[0 + 1].label, 'app%.py')
  H.ok(pins[1].tokens > 0)
  vim.cmd('ContenoxUnpin')
  H.wait_for(function()
    return H.find(notes, function(n) return n.msg:find('removed 1 pin') end) ~= nil
  end, 30000, 'the unpin notification: ' .. vim.inspect(notes))
  H.eq(#pinned_segments(), 0, 'unpinned')
  -- A line range pins just those lines.
  vim.cmd('4,5ContenoxPin')
  H.wait_for(function()
    return #request('contenox/listPins').pins == 1
  end, Q, 'the range pin')
  local pin = request('contenox/listPins').pins[1]
  H.eq(pin.range.start.line, 3)
  H.match(pinned_segments()[1].label, 'app%.py:4%-5')
  vim.cmd('ContenoxUnpin')
  H.wait_for(function()
    return #request('contenox/listPins').pins == 0
  end, Q, 'the range unpin')
end)

test('code actions come from the server through vim.lsp.buf.code_action()', function()
  request('contenox/unpin', { uri = vim.uri_from_fname(app) }) -- independent of earlier tests
  local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
  params.range = { start = { line = 3, character = 0 }, ['end'] = { line = 4, character = 16 } }
  params.context = { diagnostics = {} }
  local r = client:request_sync('textDocument/codeAction', params, T, 0)
  local titles = vim.tbl_map(function(a) return a.title end, r.result or {})
  H.ok(vim.tbl_contains(titles, 'Contenox: Explain selection'), vim.inspect(titles))
  H.ok(vim.tbl_contains(titles, 'Contenox: Pin this file'), vim.inspect(titles))
  -- Apply the pin action via the standard UI entry point (workspace/executeCommand).
  vim.lsp.buf.code_action({ context = { only = { 'source.contenox.pin' }, diagnostics = {} }, apply = true })
  H.wait_for(function()
    return #request('contenox/listPins').pins == 1
  end, Q, 'the pin code action')
  vim.lsp.buf.code_action({ context = { only = { 'source.contenox.pin' }, diagnostics = {} }, apply = true })
  H.wait_for(function()
    return #request('contenox/listPins').pins == 0
  end, Q, 'the unpin code action')
end)

test('<C-c> in the ask float cancels the request; the next ask works', function()
  local ask = require('contenox.ask')
  local state = contenox.ask('Write a long story about adding two numbers.', { max_tokens = 200 })
  H.wait_for(function()
    return #state.pieces >= 1
  end, T, 'the first partial result')
  H.eq(vim.api.nvim_get_current_win(), state.win, 'the float has focus')
  vim.api.nvim_feedkeys(vim.keycode('<C-c>'), 'x', false)
  H.ok(state.cancelled and state.done, 'cancelled')
  local n = #state.pieces
  vim.wait(1500)
  H.eq(#state.pieces, n, 'no pieces after cancel')
  H.match(H.buf_text(state.buf), '%[cancelled%]')
  H.ok(n < 200)
  close_floats()
  -- The server is idle again and answers the next ask.
  local nxt = contenox.ask('What does add return?', { max_tokens = 4 })
  H.wait_for(function()
    return nxt.done
  end, T, 'the next answer')
  H.eq(nxt.err, nil, 'next ask ok')
  H.ok(ask.current == nxt)
  H.eq(table.concat(nxt.pieces), nxt.result.text)
  close_floats()
end)

local function ask_cmd(cmd)
  local ask = require('contenox.ask')
  local before = ask.current
  vim.cmd(cmd)
  local state = ask.current
  H.ok(state and state ~= before, cmd .. ': an ask started')
  H.wait_for(function()
    return state.done
  end, T, cmd .. ': the answer')
  H.eq(state.err, nil, cmd .. ': no error')
  return state
end

local function conversation_turns(id)
  return request('contenox/conversation', { action = 'list', conversationId = id }).turns
end

test(':ContenoxAsk twice continues one conversation (same id, turn 2), across buffers', function()
  contenox.new_conversation() -- independent of the asks of earlier tests
  local id = contenox.conversation_id()
  H.match(id, '^nvim%-%d+%-%d+$', 'a generated id')
  H.eq(#conversation_turns(id), 0, 'a new conversation is empty')
  vim.api.nvim_win_set_cursor(0, { 5, 4 })
  local first = ask_cmd('ContenoxAsk What does add return?')
  H.eq(first.conversation_id, id, 'the first ask sends the current id')
  H.eq(first.result.conversationId, id, 'the server answers in that conversation')
  H.eq(first.result.turn, 1)
  H.eq(first.turn, 1)
  close_floats()
  -- Another buffer of the same workspace client continues the same conversation.
  vim.cmd.edit(ws .. '/util.py')
  local ubuf = vim.api.nvim_get_current_buf()
  H.wait_for(function()
    return #vim.lsp.get_clients({ name = 'contenox', bufnr = ubuf }) == 1
  end, Q, 'the client to attach to util.py')
  H.eq(vim.lsp.get_clients({ name = 'contenox', bufnr = ubuf })[1].id, client.id, 'one client for the workspace')
  local second = ask_cmd('ContenoxAsk And what does clamp do?')
  H.eq(second.conversation_id, id, 'the second ask sends the same id')
  H.eq(second.result.conversationId, id)
  H.eq(second.result.turn, 2, 'the second answer is turn 2')
  H.match(H.buf_text(second.buf), 'turn 2', 'the float shows the turn')
  local turns = conversation_turns(id)
  H.eq(#turns, 2, 'the server keeps both turns')
  H.eq(turns[1].question, 'What does add return?')
  H.eq(turns[1].answer, first.result.text)
  H.eq(turns[2].question, 'And what does clamp do?')
  H.eq(turns[2].answer, second.result.text)
  H.eq(contenox.conversation_id(), id, 'still the current conversation')
  close_floats()
end)

test(':ContenoxNew starts another conversation; :ContenoxNew question asks in a new one', function()
  local old = contenox.conversation_id()
  local old_turns = #conversation_turns(old)
  H.ok(old_turns >= 1, 'the previous conversation has turns')
  local before = #notes
  vim.cmd('ContenoxNew')
  local id = contenox.conversation_id()
  H.ok(id ~= old, 'a new id')
  local said = {}
  for i = before + 1, #notes do
    said[#said + 1] = notes[i].msg
  end
  H.ok(H.find(said, function(m) return m:find('new conversation') end), 'a notification: ' .. vim.inspect(said))
  H.eq(#vim.api.nvim_list_wins(), 1, 'no float without a question')
  vim.api.nvim_win_set_cursor(0, { 5, 4 })
  local state = ask_cmd('ContenoxAsk What does add return?')
  H.eq(state.conversation_id, id, 'the ask uses the new id')
  H.eq(state.result.conversationId, id)
  H.eq(state.result.turn, 1, 'the first turn of the new conversation')
  H.eq(#conversation_turns(id), 1)
  H.eq(#conversation_turns(old), old_turns, 'the previous conversation is kept as it was')
  close_floats()
  -- With a question: a new conversation, asked at once.
  local asked = ask_cmd('ContenoxNew What does scaled return?')
  local id2 = contenox.conversation_id()
  H.ok(id2 ~= id and id2 ~= old, 'another new id')
  H.eq(asked.conversation_id, id2)
  H.eq(asked.result.conversationId, id2)
  H.eq(asked.result.turn, 1)
  H.eq(conversation_turns(id2)[1].question, 'What does scaled return?')
  close_floats()
end)

test(':ContenoxAsk! sends the unnamed register as test output; its traceback leads the code', function()
  vim.cmd.edit(app)
  local trace = table.concat({
    'Traceback (most recent call last):',
    '  File "app.py", line 14, in scaled',
    '    return clamp(x * 2, 0, 10)',
    '  File "util.py", line 3, in clamp',
    "TypeError: '<' not supported between instances of 'str' and 'int'",
  }, '\n') .. '\n'
  vim.fn.setreg('"', trace)
  local sent
  local plain_request = client.request
  client.request = function(self, method, params, ...)
    if method == 'contenox/ask' then
      sent = params
    end
    return plain_request(self, method, params, ...)
  end
  local ok, state = pcall(ask_cmd, 'ContenoxAsk! Why does scaled fail?')
  client.request = plain_request
  H.ok(ok, tostring(state))
  H.eq(sent.outputs, { { kind = 'test', source = 'register', text = trace } }, 'the register went along')
  close_floats()
  -- What the server makes of the same params: the output is a segment, its frames lead the code.
  local r = request('contenox/explainContext', {
    question = 'Why does scaled fail?', includeText = true, outputs = sent.outputs,
    textDocument = { uri = vim.uri_from_fname(app) }, position = { line = 4, character = 0 },
  })
  local out = H.find(r.segments, function(s) return s.label == 'test output register' end)
  H.ok(out and out.text:find('not supported', 1, true), 'the output segment')
  local code = H.find(r.segments, function(s) return s.label == 'code (question)' end)
  H.ok(code, 'a question code segment')
  local first = code.text:match('\n\n(util%.py:%d+ [^\n]+)')
  H.eq(first, "util.py:1 clamp (in the output's traceback)", 'the innermost frame first')
  H.ok(code.text:find("app.py:13 scaled (in the output's traceback)", 1, true), 'then its caller')
  -- An empty register sends nothing and says why.
  vim.fn.setreg('"', '')
  local before = require('contenox.ask').current
  vim.cmd('ContenoxAsk! Why?')
  H.eq(require('contenox.ask').current, before, 'no ask without output')
  H.ok(notes[#notes].msg:find('register is empty', 1, true), 'a warning')
  H.eq(notes[#notes].level, vim.log.levels.WARN)
end)

test(':ContenoxStatus shows the session in a float', function()
  local status = require('contenox.status')
  status.window = nil
  request('contenox/unpin', { uri = vim.uri_from_fname(app) }) -- independent of earlier tests
  vim.cmd('ContenoxStatus')
  H.wait_for(function()
    return status.window ~= nil
  end, Q, 'the status float')
  local text = H.buf_text(status.window.buf)
  H.match(text, 'state%s+%a+')
  H.match(text, 'resident tokens')
  H.match(text, 'model%s+%S')
  H.match(text, 'pins%s+none')
  close_floats()
end)

test('no error notifications along the way', function()
  H.eq(errors(), {})
end)

_G.after_all = function()
  vim.fn.delete(ws, 'rf')
end
