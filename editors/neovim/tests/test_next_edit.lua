-- Headless Neovim 0.11 against the real server: after an edit, contenox/nextEdit answers and
-- the server counts it; a suggestion is drawn with extmarks (the replaced text, the new text,
-- a sign), <Tab> jumps to it, <Tab> on its line applies it and runs its accept command,
-- <C-]> dismisses one; both keys fall through when nothing is shown.
--
-- The embedded model is a base model, not a next-edit model: it mostly copies the region
-- unchanged, so whether it suggests anything for a given edit is the model's call. The drawing
-- tests therefore show a suggestion of the protocol's shape (as contenox/nextEdit sends it);
-- the request/answer round trip is the real server's.
local H = dofile(vim.g.contenox_test_dir .. '/helpers.lua')
local contenox = require('contenox')
local next_edit = require('contenox.next_edit')
local util = require('contenox.util')

local ws = H.make_workspace()
H.capture_notify()
local app = ws .. '/app.py'
local T = 240000 -- one model operation on 2 slow cores, generously
local client ---@type vim.lsp.Client

local function status()
  local r = client:request_sync('contenox/status', vim.empty_dict(), T)
  return r and r.result
end

test('setup enables next edits; the server advertises them', function()
  H.ok(contenox.setup({ max_tokens = 6, debounce_ms = 100, status_interval_ms = 0,
    inline = false, next_edit = { debounce_ms = 50 } }), 'setup')
  vim.cmd.edit(app)
  H.wait_for(function()
    client = util.client(0)
    return client ~= nil and client.initialized
  end, 60000, 'the contenox client to attach')
  H.eq(client.server_capabilities.experimental.contenoxNextEdit.methods[1], 'contenox/nextEdit')
  H.wait_for(function()
    local st = status()
    return st and st.state == 'warm'
  end, T, 'a warm server')
end)

test('an edit, then a request: the server answers and counts it', function()
  local buf = vim.fn.bufnr(app)
  -- Rename add()'s first parameter; its body still uses the old name.
  vim.api.nvim_buf_set_text(buf, 3, 8, 3, 9, { 'first' })
  vim.api.nvim_win_set_cursor(0, { 4, 13 })
  H.wait_for(function() return status().nextEdit.historySteps == 1 end, T, 'the edit in the history')
  next_edit.last_result = nil
  next_edit.request()
  H.wait_for(function() return next_edit.last_result ~= nil end, T, 'the next-edit answer')
  H.eq(type(next_edit.last_result.edits), 'table', 'edits is a list')
  local st = status().nextEdit
  H.ok(st.requests >= 1 and st.format == 'base', vim.inspect(st))
  next_edit.dismiss()
end)

-- What contenox/nextEdit sends: replace `a` in `return a + b` (line 5) with `first`.
local function suggestion()
  return {
    text = 'first',
    textDocument = { uri = vim.uri_from_fname(app), version = vim.lsp.util.buf_versions[vim.fn.bufnr(app)] },
    range = { start = { line = 4, character = 11 }, ['end'] = { line = 4, character = 12 } },
    command = { title = 'Accept next edit', command = 'contenox.acceptNextEdit', arguments = { { id = 999 } } },
  }
end

test('a suggestion is drawn; <Tab> jumps to it, <Tab> applies it and runs its command', function()
  local buf = vim.fn.bufnr(app)
  local shown_before = status().nextEdit.displayed
  local ran = {}
  local exec = client.exec_cmd
  client.exec_cmd = function(self, cmd, ...) -- record, then run it on the real server
    ran[#ran + 1] = cmd.command
    return exec(self, cmd, ...)
  end
  next_edit.show(buf, suggestion(), client)
  local marks = vim.api.nvim_buf_get_extmarks(buf, next_edit.ns, 0, -1, { details = true })
  local struck, ghost, signed = false, false, false
  for _, m in ipairs(marks) do
    local d = m[4]
    struck = struck or (d.hl_group == 'DiffDelete' and m[2] == 4 and m[3] == 11 and d.end_col == 12)
    ghost = ghost or (d.virt_text ~= nil and d.virt_text[1][1] == 'first')
    signed = signed or (d.sign_text ~= nil)
  end
  H.ok(struck and ghost and signed, 'removed text, new text and a sign: ' .. vim.inspect(marks))
  H.wait_for(function() return status().nextEdit.displayed == shown_before + 1 end, T,
    'the server told it was shown (textDocument/didShowInlineEdit)')
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'x', false)
  vim.wait(100)
  H.eq(vim.api.nvim_win_get_cursor(0), { 5, 11 }, 'the cursor jumped to the suggestion')
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'x', false)
  H.wait_for(function() return next_edit.current == nil end, 5000, 'the suggestion applied')
  H.eq(vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1], '    return first + b', 'the buffer has the edit')
  H.eq(#vim.api.nvim_buf_get_extmarks(buf, next_edit.ns, 0, -1, {}), 0, 'nothing drawn after')
  H.wait_for(function() return ran[1] == 'contenox.acceptNextEdit' end, 5000, 'the accept command')
  client.exec_cmd = exec
end)

test('<C-]> dismisses a suggestion; with nothing shown both keys fall through', function()
  local buf = vim.fn.bufnr(app)
  local s = suggestion()
  s.range = { start = { line = 0, character = 0 }, ['end'] = { line = 0, character = 4 } }
  next_edit.show(buf, s, client)
  H.ok(#vim.api.nvim_buf_get_extmarks(buf, next_edit.ns, 0, -1, {}) > 0, 'drawn')
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<C-]>', true, false, true), 'x', false)
  H.wait_for(function() return next_edit.current == nil end, 5000, 'dismissed')
  H.eq(#vim.api.nvim_buf_get_extmarks(buf, next_edit.ns, 0, -1, {}), 0, 'nothing drawn')
  H.eq(vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1], 'from util import clamp', 'unchanged')
  for _, key in ipairs({ '<Tab>', '<C-]>' }) do
    local map = vim.fn.maparg(key, 'n', false, true)
    H.eq(map.callback(), vim.api.nvim_replace_termcodes(key, true, false, true), key .. ' falls through')
  end
end)
