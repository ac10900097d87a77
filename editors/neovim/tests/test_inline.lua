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

local function keys(k)
  return vim.api.nvim_replace_termcodes(k, true, false, true)
end

--- Type `typed` in insert mode and run `steps` (functions called every 100 ms while insert
--- mode is active; each returns true when done). Headless Neovim runs insert mode inside
--- nvim_feedkeys(..., 'x!'), so the steps drive it from a timer; the last one leaves it.
local function in_insert_mode(typed, steps, timeout_ms)
  local i, t0 = 1, vim.uv.now()
  local timer = assert(vim.uv.new_timer())
  timer:start(100, 100, vim.schedule_wrap(function()
    if i > #steps or vim.uv.now() - t0 > timeout_ms then
      timer:stop()
      vim.api.nvim_feedkeys(keys('<Esc>'), 't', false)
      return
    end
    if steps[i]() then
      i = i + 1
    end
  end))
  vim.api.nvim_feedkeys(keys(typed), 'tx!', false) -- returns once insert mode is left
  timer:stop()
  return i > #steps
end

test('typing shows a suggestion as an extmark; <Tab> accepts it into the buffer', function()
  local buf = vim.fn.bufnr(app)
  vim.api.nvim_win_set_cursor(0, { 5, 0 }) -- "    return a + b" in add()
  local seen, before, text
  local done = in_insert_mode('O    return ', {
    function() -- a suggestion appears while typing (debounced request)
      if inline.current == nil then
        return false
      end
      seen = marks(buf)
      text = inline.current.text
      before = vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1]
      vim.api.nvim_feedkeys(keys('<Tab>'), 't', false)
      return true
    end,
    function() -- accepted: the text is in the buffer and the extmark is gone
      return inline.current == nil and vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1] ~= before
    end,
  }, T)
  H.ok(done, 'the suggestion appeared and was accepted')
  H.eq(#seen, 1, 'one extmark')
  H.eq(seen[1][2], 4, 'on the new line')
  H.ok(text:match('%S'), 'not whitespace only')
  H.eq(vim.api.nvim_buf_get_lines(buf, 4, 5, false)[1],
    before .. vim.split(text, '\n', { plain = true })[1], 'the suggestion inserted')
  H.eq(#marks(buf), 0, 'no extmark left')
  H.wait_for(function()
    local r = client:request_sync('contenox/status', vim.empty_dict(), T)
    return r and r.result and r.result.completion.accepted == 1
  end, 30000, 'the server counted the accept')
end)

test('without a suggestion <Tab> falls through; leaving insert mode dismisses', function()
  local buf = vim.fn.bufnr(app)
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  local had_mark = false
  in_insert_mode('O<Tab>x', {
    function()
      had_mark = inline.current ~= nil
      return had_mark
    end,
  }, T)
  H.match(vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1], '^%s+x', 'a plain <Tab> was inserted')
  H.ok(had_mark, 'a suggestion was shown before leaving')
  H.eq(inline.current, nil, 'dismissed on InsertLeave')
  H.eq(#marks(buf), 0, 'no extmark left')
end)
