-- Headless Neovim 0.11 against the real server: typing in insert mode brings a suggestion
-- (an extmark), <Tab> accepts it (the buffer changes), leaving insert mode dismisses it.
local H = dofile(vim.g.contenox_test_dir .. '/helpers.lua')
local contenox = require('contenox')
local inline = require('contenox.inline')
local util = require('contenox.util')

local ws = H.make_workspace()
H.capture_notify()
local app = ws .. '/app.py'
local T = 240000 -- one model operation on 2 slow cores, generously
local client ---@type vim.lsp.Client

local function marks(buf)
  return vim.api.nvim_buf_get_extmarks(buf, inline.ns, 0, -1, { details = true })
end

test('setup enables inline completion; the server advertises it', function()
  H.ok(contenox.setup({ max_tokens = 6, debounce_ms = 100, status_interval_ms = 0,
    inline = { debounce_ms = 50 } }), 'setup')
  vim.cmd.edit(app)
  H.wait_for(function()
    client = util.client(0)
    return client ~= nil and client.initialized
  end, 60000, 'the contenox client to attach')
  H.ok(client.server_capabilities.inlineCompletionProvider, 'inlineCompletionProvider')
  H.wait_for(function()
    local r = client:request_sync('contenox/status', vim.empty_dict(), T)
    return r and r.result and r.result.state == 'warm'
  end, T, 'a warm server')
end)

test('typing in insert mode shows a suggestion as an extmark', function()
  local buf = vim.fn.bufnr(app)
  -- A new line under "def add(a, b):" ends up as "    return " after typing.
  vim.api.nvim_win_set_cursor(0, { 5, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('O    return', true, false, true), 'tx!', false)
  H.eq(vim.fn.mode(), 'i', 'still in insert mode')
  vim.api.nvim_feedkeys(' ', 'tx!', false)
  H.wait_for(function()
    return inline.current ~= nil
  end, T, 'a suggestion')
  local m = marks(buf)
  H.eq(#m, 1, 'one extmark')
  H.eq(m[1][2], 4, 'on the new line') -- 0-based row of line 5
  H.ok(inline.current.text:match('%S'), 'not whitespace only')
end)

test('<Tab> accepts the suggestion: the buffer changes and the extmark goes', function()
  local buf = vim.fn.bufnr(app)
  local text = inline.current.text
  local before = vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1]
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'tx!', false)
  H.wait_for(function()
    return inline.current == nil and vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1] ~= before
  end, 5000, 'the accepted text')
  local line = vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1]
  H.eq(line, before .. vim.split(text, '\n', { plain = true })[1], 'the suggestion inserted')
  H.eq(#marks(buf), 0, 'no extmark left')
  H.wait_for(function()
    local r = client:request_sync('contenox/status', vim.empty_dict(), T)
    return r and r.result and r.result.completion.accepted == 1
  end, 30000, 'the server counted the accept')
end)

test('without a suggestion <Tab> falls through; leaving insert mode dismisses', function()
  local buf = vim.fn.bufnr(app)
  inline.dismiss()
  local before = vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1]
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'tx!', false)
  H.ok(#vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1] > #before, 'a normal <Tab> was inserted')
  vim.api.nvim_feedkeys('x', 'tx!', false)
  H.wait_for(function()
    return inline.current ~= nil
  end, T, 'another suggestion')
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Esc>', true, false, true), 'tx', false)
  H.eq(inline.current, nil, 'dismissed on InsertLeave')
  H.eq(#marks(buf), 0, 'no extmark left')
end)
