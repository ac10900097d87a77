-- Contenox LSP config for Neovim >= 0.11 (`:help lsp-config`).
--
-- With this directory on 'runtimepath', `vim.lsp.enable('contenox')` starts `contenox-lsp`
-- for the filetypes below. `require('contenox').setup{...}` does that for you and adds the
-- :Contenox* commands; override any field with `vim.lsp.config('contenox', {...})`.

---@type vim.lsp.Config
return {
  cmd = { 'contenox-lsp' },
  filetypes = {
    'python', 'lua', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact',
    'go', 'rust', 'java', 'c', 'cpp', 'markdown',
  },
  -- The workspace root: the nearest marker, else the file's directory (the server only
  -- accepts paths inside a workspace folder).
  root_dir = function(bufnr, on_dir)
    local root = vim.fs.root(bufnr, { '.git', 'AGENTS.md', '.contenox' })
    if not root then
      local name = vim.api.nvim_buf_get_name(bufnr)
      if name == '' then
        return
      end
      root = vim.fs.dirname(name)
    end
    on_dir(root)
  end,
  -- contenox_lsp/options.py: debounceMs, prefillOnIdle, maxTokens, contextTokens, repoMapTokens, profile,
  -- model, snapshotDir, logLevel. The server validates them (bad values → a warning).
  init_options = { debounceMs = 300, prefillOnIdle = true },
  handlers = {
    -- Partial results of contenox/ask arrive as $/progress; everything else goes to the
    -- default handler (work-done progress: indexing, warming).
    ['$/progress'] = function(err, result, ctx, config)
      return require('contenox.progress').handler(err, result, ctx, config)
    end,
  },
}
